"""The notebooks under `notebooks/`: stored without outputs, and each runs end to end.

The slow tests execute each notebook with nbclient in a `python3` kernel (the ipykernel of
this interpreter), from the `notebooks/` folder, with the offline Multi30k copy passed
through `KERAS_TRANSFORMER_MULTI30K_DIR`, TFDS's data folder and the temporary folder
(where notebooks write exports and run directories) under pytest's `tmp_path`. A check cell
appended in memory (the file is not modified) prints the notebook's results as JSON, and
the assertions compare them with what the code must give: values computed here from the
paper's formulas, the masks' known cells, equalities that only hold if the code is right.
A cell that raises fails the test.
"""

import glob
import json
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NOTEBOOKS_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = ("quickstart", "anatomy", "distributed")
CELL_TIMEOUT_S = 600


def _notebooks() -> list[str]:
    paths = glob.glob(os.path.join(NOTEBOOKS_DIR, "**", "*.ipynb"), recursive=True)
    return sorted(p for p in paths if ".ipynb_checkpoints" not in p)


def test_notebooks_are_stored_without_outputs():
    paths = _notebooks()
    assert [os.path.join(NOTEBOOKS_DIR, f"{n}.ipynb") for n in sorted(NOTEBOOKS)] == paths
    for path in paths:
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        name = os.path.relpath(path, ROOT)
        assert notebook["nbformat"] == 4, name
        assert notebook["metadata"]["kernelspec"]["name"] == "python3", name
        for i, cell in enumerate(notebook["cells"]):
            assert "execution" not in cell["metadata"], f"{name}: cell {i} keeps run times"
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [], f"{name}: cell {i} has stored outputs"
                assert cell["execution_count"] is None, f"{name}: cell {i} has an execution count"
        # One knob, in the parameters cell, trains for real results; off by default.
        sources = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
        assert sum("TRAIN_LONGER = False" in s for s in sources) == 1, name


def _run(name, check_cell, tmp_path, monkeypatch, multi30k_dir) -> dict:
    """Executes notebooks/NAME.ipynb plus `check_cell`; returns the JSON the cell printed."""
    import nbformat
    from nbclient import NotebookClient

    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    monkeypatch.setenv("KERAS_TRANSFORMER_MULTI30K_DIR", multi30k_dir)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tensorflow_datasets"))
    monkeypatch.setenv("TMPDIR", str(temp_dir))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    notebook = nbformat.read(os.path.join(NOTEBOOKS_DIR, f"{name}.ipynb"), as_version=4)
    nbformat.validate(notebook)
    notebook.cells.append(nbformat.v4.new_code_cell(check_cell))
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
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
    check["temp_dir"] = str(temp_dir)
    # The PNGs the notebook displayed (its figures).
    check["pngs"] = sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    return check


CHECK_PREAMBLE = """
import json, os, sys
def _check(values):
    print("CHECK " + json.dumps({"prefix": sys.prefix, "cwd": os.getcwd(), **values}))
"""

QUICKSTART_CHECK = (
    CHECK_PREAMBLE
    + """
training = list(train_pairs.take(64).as_numpy_iterator())
_check({
    "losses": [float(v) for v in history.history["loss"]],
    "sources": sources,
    "references": references,
    "translations": translations,
    "greedy_translations": greedy_translations,
    "nbest_first": beam.translate_nbest(sources[:1], n=4)[0][0][0],
    "bleu": result.scores["bleu"],
    "cross_attention_shape": list(cross_attention.shape),
    "row_sum_deviation": float(np.abs(cross_attention.sum(-1) - 1.0).max()),
    "source_pieces": source_pieces,
    "target_pieces": target_pieces,
    "export_path": export_path,
    "served": [t.decode() for t in outputs["translations"].numpy()],
    "training_references": [english.decode() for _, english in training],
    "training_translations": greedy.translate([german.decode() for german, _ in training]),
})
"""
)


def _words(sentence: str) -> set[str]:
    return set(sentence.lower().replace(".", " ").replace(",", " ").split())


def _overlap(hypotheses, references) -> float:
    """Mean share of a hypothesis' words found in its reference."""
    shares = [
        len(_words(h) & _words(r)) / max(1, len(_words(h))) for h, r in zip(hypotheses, references)
    ]
    return float(np.mean(shares))


@pytest.mark.slow
def test_quickstart_notebook(tmp_path, monkeypatch, multi30k_dir):
    import sacrebleu

    check = _run("quickstart", QUICKSTART_CHECK, tmp_path, monkeypatch, multi30k_dir)

    losses = check["losses"]
    assert len(losses) == 4 and all(a > b for a, b in zip(losses, losses[1:])), losses
    assert len(check["sources"]) == len(check["translations"]) == 20
    assert len(check["greedy_translations"]) == 20
    # The notebook's BLEU is sacreBLEU's corpus BLEU of the printed translations.
    expected = sacrebleu.corpus_bleu(check["translations"], [check["references"]]).score
    assert check["bleu"] == pytest.approx(expected, abs=1e-9)
    assert check["nbest_first"] == check["translations"][0]  # the best of the n-best
    # After a minute of training the translations follow their source: the words of a
    # training sentence's translation are found in its reference more often than in the
    # reference of the next sentence (a model ignoring its source would tie).
    hypotheses, references = check["training_translations"], check["training_references"]
    matched = _overlap(hypotheses, references)
    shifted = _overlap(hypotheses, references[1:] + references[:1])
    assert matched > shifted + 0.02, (matched, shifted)

    layers, heads, target, source = check["cross_attention_shape"]
    assert (layers, heads) == (2, 4)
    assert (target, source) == (len(check["target_pieces"]), len(check["source_pieces"]))
    assert check["source_pieces"][-1] == "</s>"
    assert check["row_sum_deviation"] < 1e-5  # each row of attention is a distribution
    # The pieces whose attention is drawn are those of the translation.
    emitted = [p for p in check["target_pieces"] if p != "</s>"]
    assert "".join(emitted).replace("▁", " ").strip() == check["translations"][0]
    assert check["pngs"] == 2  # the training curves and the attention heads

    # The export answers as the Python translator does.
    export_path = check["export_path"]
    assert os.path.realpath(export_path).startswith(os.path.realpath(check["temp_dir"]))
    assert os.path.basename(export_path) == "1"
    assert os.path.isfile(os.path.join(export_path, "saved_model.pb"))
    assert check["served"] == check["translations"][:2]


ANATOMY_CHECK = (
    CHECK_PREAMBLE
    + """
_check({
    "d_model": D_MODEL,
    "num_heads": NUM_HEADS,
    "num_layers": NUM_LAYERS,
    "vocab_size": VOCAB_SIZE,
    "pe_7_10": float(pe[7, 10]),
    "pe_7_11": float(pe[7, 11]),
    "embedding_error": embedding_error,
    "rotation_error": rotation_error,
    "lengths": lengths,
    "padding": padding.astype(int).tolist(),
    "look_ahead": look_ahead.astype(int).tolist(),
    "combined": combined.astype(int).tolist(),
    "attention_shape": list(weights.shape),
    "attention_error": attention_error,
    "row_sum_deviation": float(np.abs(weights.sum(-1) - 1.0).max()),
    "shortest": shortest,
    "padded_key_weight": float(weights[shortest, :, :, lengths[shortest]:].max()),
    "padding_effect": padding_effect,
    "future_effect": future_effect,
    "decoded_shape": list(decoded.shape),
    "target_length": int(T),
    "logits_shape": list(logits.shape),
    "projection_error": projection_error,
    "losses": [float(v) for v in history.history["loss"]],
    "translation_shapes": {k: list(v.shape) for k, v in translation_weights.items()},
    "num_source_pieces": len(source_pieces),
    "num_target_pieces": len(target_pieces),
    "translation_row_deviation": float(max(
        np.abs(translation_weights[k].sum(-1) - 1.0).max() for k in translation_weights
    )),
    "decoder_future_weight": float(max(
        np.triu(w, k=1).max() for w in translation_weights["decoder_self_attention"].reshape(
            -1, len(target_pieces), len(target_pieces))
    )),
    "figure_panels": {k: sum(1 for a in f.axes if a.images) for k, f in figures.items()},
})
"""
)


@pytest.mark.slow
def test_anatomy_notebook(tmp_path, monkeypatch, multi30k_dir):
    check = _run("anatomy", ANATOMY_CHECK, tmp_path, monkeypatch, multi30k_dir)
    d_model, heads, layers = check["d_model"], check["num_heads"], check["num_layers"]

    # 1-2: embeddings and the positional encoding, against the paper's formulas.
    assert check["embedding_error"] < 1e-5
    angle = 7 / 10000 ** (10 / d_model)
    assert check["pe_7_10"] == pytest.approx(math.sin(angle), abs=1e-6)
    assert check["pe_7_11"] == pytest.approx(math.cos(angle), abs=1e-6)
    assert check["rotation_error"] < 1e-4

    # 3: masks at known cells: real tokens, the lower triangle, and their AND.
    lengths = check["lengths"]
    padding = np.array(check["padding"])
    length = padding.shape[1]
    assert padding.tolist() == [[1] * n + [0] * (length - n) for n in lengths]
    assert np.array_equal(check["look_ahead"], np.tril(np.ones((length, length), int)))
    expected = np.tril(np.ones((length, length), int))[None] * padding[:, None, :]
    assert np.array_equal(check["combined"], expected)
    assert min(lengths) < length  # the batch has padding to mask

    # 4: multi-head attention equals softmax(QK^T / sqrt(d_k)) V computed by hand.
    assert check["attention_shape"] == [3, heads, length, length]
    assert check["attention_error"] < 1e-4
    assert check["row_sum_deviation"] < 1e-5
    assert check["padded_key_weight"] == 0.0

    # 5: padding and the future do not leak into the layers' outputs.
    assert check["padding_effect"] < 1e-5 and check["future_effect"] < 1e-5
    assert check["decoded_shape"] == [3, check["target_length"], d_model]

    # 6: tied output projection.
    assert check["logits_shape"] == [3, check["target_length"], check["vocab_size"]]
    assert check["projection_error"] < 1e-3

    # 7: training lowers the loss; the attention of a translation has the right shapes, is
    # a distribution per row, and the decoder never attends to later pieces.
    losses = check["losses"]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    source, target = check["num_source_pieces"], check["num_target_pieces"]
    assert check["translation_shapes"] == {
        "cross_attention": [layers, heads, target, source],
        "decoder_self_attention": [layers, heads, target, target],
        "encoder_self_attention": [layers, heads, source, source],
    }
    assert check["translation_row_deviation"] < 1e-5
    assert check["decoder_future_weight"] == 0.0
    assert check["figure_panels"] == {
        "encoder_self_attention": layers * heads,
        "decoder_self_attention": layers * heads,
        "cross_attention": layers * heads,
    }
    # PE curves, PE table, masks, attention before training, training curves, 3 kinds.
    assert check["pngs"] == 8


DISTRIBUTED_CHECK = (
    CHECK_PREAMBLE
    + """
_check({
    "replicas": REPLICAS,
    "devices": DEVICES,
    "global_batch": int(source.shape[0]),
    "per_replica_batch": per_replica_batch,
    "slices_are_the_batch": bool(slices_are_the_batch),
    "replica_losses": replica_losses,
    "replica_token_means": replica_token_means,
    "summed_loss": summed_loss,
    "global_token_mean": global_token_mean,
    "losses": [float(v) for v in history.history["loss"]],
    "replica_difference": replica_difference,
    "run_dir": RUN_DIR,
    "run_files": sorted(os.listdir(RUN_DIR)),
    "worker_codes": worker_codes,
    "worker_losses": worker_losses,
    "worker_difference": worker_difference,
    "num_weight_arrays": len(worker_weights[0]),
})
"""
)


@pytest.mark.slow
def test_distributed_notebook(tmp_path, monkeypatch, multi30k_dir):
    check = _run("distributed", DISTRIBUTED_CHECK, tmp_path, monkeypatch, multi30k_dir)

    # All GPUs where there are some, else two logical CPUs; a global batch of 64 cut into
    # one consecutive slice per replica.
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    devices = [f"/gpu:{i}" for i in range(len(gpus))] or ["/cpu:0", "/cpu:1"]
    replicas = len(devices)
    assert check["devices"] == devices and check["replicas"] == replicas
    sizes = check["per_replica_batch"]
    assert check["global_batch"] == 64 == sum(sizes) and len(sizes) == replicas
    assert max(sizes) - min(sizes) <= 1  # [32, 32] on two replicas
    assert check["slices_are_the_batch"]
    # Each replica's loss is its own token mean divided by the replicas; their sum is the
    # mean of the replicas' token means, close to (not equal to) the global token mean.
    means = np.array(check["replica_token_means"])
    np.testing.assert_allclose(check["replica_losses"], means / replicas, rtol=1e-4)
    assert check["summed_loss"] == pytest.approx(means.mean(), rel=1e-4)
    assert check["summed_loss"] == pytest.approx(check["global_token_mean"], rel=0.05)

    losses = check["losses"]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    # The mirrored copies stay the same: every replica applies the same all-reduced
    # gradient. Not bit for bit: the all-reduce may sum in another order on each replica,
    # and Adam (epsilon 1e-9) turns such rounding in near-zero gradients into steps of up
    # to the learning rate for a few weights (seen under load: 3e-4); copies that applied
    # their own gradients would differ by several steps' worth everywhere.
    assert check["replica_difference"] < 2e-3

    # Two worker processes under TF_CONFIG: both succeed, log the same (all-reduced) loss,
    # and end with identical weights.
    assert check["worker_codes"] == [0, 0]
    assert os.path.realpath(check["run_dir"]).startswith(os.path.realpath(check["temp_dir"]))
    for name in (
        "config.yaml",
        "model.keras",
        "checkpoints",
        "checkpoints_worker1",
        "logs_worker1",
    ):
        assert name in check["run_files"], name
    # Each worker's backup removed once the chief saved the model (they wait for it).
    assert not [name for name in check["run_files"] if name.startswith("backup")]
    chief, worker = check["worker_losses"]
    assert len(chief) == 2 and chief[1] < chief[0], chief
    assert worker == pytest.approx(chief, rel=1e-6)
    # Identical up to the all-reduce's summation order (as for the replicas above).
    assert check["num_weight_arrays"] > 10 and check["worker_difference"] < 2e-3
    assert check["pngs"] == 1  # the training curves
