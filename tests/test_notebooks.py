"""The notebooks under `notebooks/`: stored without outputs, and the quickstart runs end to end.

The slow test executes `notebooks/quickstart.ipynb` with nbclient in a `python3` kernel (the
ipykernel of this interpreter), from the `notebooks/` folder, with the offline Multi30k copy
passed through `KERAS_TRANSFORMER_MULTI30K_DIR`, TFDS's data folder and the temporary folder
(where the notebook exports) under pytest's `tmp_path`. A check cell appended in memory (the
file is not modified) prints the notebook's results as JSON for the assertions.
"""

import glob
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NOTEBOOKS_DIR = os.path.join(ROOT, "notebooks")
QUICKSTART = os.path.join(NOTEBOOKS_DIR, "quickstart.ipynb")

CHECK_CELL = """
import json, os, sys
print("CHECK " + json.dumps({
    "prefix": sys.prefix,
    "cwd": os.getcwd(),
    "num_sources": len(sources),
    "translations": translations,
    "greedy_translations": greedy_translations,
    "bleu": result.scores["bleu"],
    "losses": [float(v) for v in history.history["loss"]],
    "cross_attention_shape": list(cross_attention.shape),
    "num_source_pieces": len(source_pieces),
    "num_target_pieces": len(target_pieces),
    "export_path": export_path,
    "served": [t.decode() for t in outputs["translations"].numpy()],
}))
"""


def _notebooks() -> list[str]:
    paths = glob.glob(os.path.join(NOTEBOOKS_DIR, "**", "*.ipynb"), recursive=True)
    return sorted(p for p in paths if ".ipynb_checkpoints" not in p)


def test_notebooks_are_stored_without_outputs():
    paths = _notebooks()
    assert QUICKSTART in paths
    for path in paths:
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        name = os.path.relpath(path, ROOT)
        assert notebook["nbformat"] == 4, name
        assert notebook["metadata"]["kernelspec"]["name"] == "python3", name
        for i, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [], f"{name}: cell {i} has stored outputs"
                assert cell["execution_count"] is None, f"{name}: cell {i} has an execution count"


@pytest.mark.slow
def test_quickstart_notebook_runs(tmp_path, monkeypatch, multi30k_dir):
    import nbformat
    from nbclient import NotebookClient

    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    monkeypatch.setenv("KERAS_TRANSFORMER_MULTI30K_DIR", multi30k_dir)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tensorflow_datasets"))
    monkeypatch.setenv("TMPDIR", str(temp_dir))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    notebook = nbformat.read(QUICKSTART, as_version=4)
    nbformat.validate(notebook)
    notebook.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": NOTEBOOKS_DIR}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", output
    lines = [
        line
        for output in notebook.cells[-1].outputs
        if output["output_type"] == "stream"
        for line in output["text"].splitlines()
        if line.startswith("CHECK ")
    ]
    assert len(lines) == 1, notebook.cells[-1].outputs
    check = json.loads(lines[0][len("CHECK ") :])

    # The `python3` kernel is this interpreter's environment, run from notebooks/.
    assert os.path.realpath(check["prefix"]) == os.path.realpath(sys.prefix)
    assert os.path.realpath(check["cwd"]) == os.path.realpath(NOTEBOOKS_DIR)

    assert check["losses"][-1] < check["losses"][0]
    assert check["num_sources"] > 0
    for key in ("translations", "greedy_translations"):
        assert len(check[key]) == check["num_sources"]
        assert all(isinstance(t, str) for t in check[key])
    assert any(check["translations"])
    assert 0.0 <= check["bleu"] <= 100.0

    layers, heads, target, source = check["cross_attention_shape"]
    assert (layers, heads) == (2, 4)
    assert (target, source) == (check["num_target_pieces"], check["num_source_pieces"])

    export_path = check["export_path"]
    assert os.path.realpath(export_path).startswith(os.path.realpath(temp_dir))
    assert os.path.basename(export_path) == "1"
    assert os.path.isfile(os.path.join(export_path, "saved_model.pb"))
    assert len(check["served"]) == 2 and all(isinstance(t, str) for t in check["served"])
