"""`keras-transformer plot RUN_DIR`: the PNGs of a trained run, and one-line errors.

The slow test trains a tiny run with `keras-transformer train` (TensorBoard logs and
`bleu.jsonl` included) and plots it; the PNGs are copied to
`build/test-plots/plot_command_*.png` to be looked at.
"""

import os
import shutil

import numpy as np
import pytest
from PIL import Image
from plot_files import PLOTS_DIR

from keras_transformer.cli import main
from keras_transformer.config import load_config
from keras_transformer.run_dir import RunPaths
from keras_transformer.training.bleu import read_bleu_log
from keras_transformer.training.curves import read_run_curves
from keras_transformer.training.schedules import TransformerSchedule

FIGURES = (
    "positional_curves",
    "positional_heatmap",
    "masks",
    "encoder_self_attention",
    "decoder_self_attention",
    "cross_attention",
    "training_curves",
    "bleu_over_time",
)


def _one_error_line(capsys) -> str:
    """The single `keras-transformer plot: error: ...` line on stderr (see cli.USER_ERRORS)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("keras-transformer ")]
    assert len(lines) == 1 and lines[0].startswith("keras-transformer plot: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_plot_refuses_a_missing_or_incomplete_run_directory(tmp_path, capsys):
    missing = str(tmp_path / "missing")
    assert main(["plot", missing]) == 2
    line = _one_error_line(capsys)
    assert "does not exist" in line and missing in line

    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    assert main(["plot", str(incomplete), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert "incomplete run directory" in line and "model.keras" in line
    assert not (tmp_path / "out").exists()  # nothing written for a run it cannot plot
    (tmp_path / "a_file").write_text("")
    assert main(["plot", str(incomplete), "--out", str(tmp_path / "a_file")]) == 2
    assert "a file; expected a folder" in _one_error_line(capsys)  # before the run is read


def _train_args(run_dir, multi30k_dir, tfds_dir):
    overrides = [
        f"training.run_dir={run_dir}",
        f"translation.local_dir={multi30k_dir}",
        f"data.data_dir={tfds_dir}",
        "data.max_train_examples=2000",
        "data.max_validation_examples=32",
        "data.vocab_size=1000",
        "data.batch_size=32",
        "model.num_encoder_layers=2",
        "model.num_decoder_layers=2",
        "model.num_heads=2",
        "model.d_model=32",
        "model.d_ff=64",
        "training.epochs=3",
        "training.steps_per_epoch=4",
        "training.validation_steps=1",
        "training.warmup_steps=4",
        "training.lr_decay=inverse_sqrt",  # the curve the test recomputes
        "translation.bleu_every=2",
        "translation.bleu_max_sentences=8",
        "training.verbose=0",
    ]
    args = ["train", "--config", "multi30k_de_en"]
    for override in overrides:
        args += ["--set", override]
    return args


@pytest.mark.slow
def test_plot_writes_the_figures_of_a_trained_run(tmp_path, multi30k_dir, capsys):
    run_dir = str(tmp_path / "run")
    assert main(_train_args(run_dir, multi30k_dir, str(tmp_path / "tfds"))) == 0
    capsys.readouterr()

    # What the figures are drawn from: TensorBoard per epoch, BLEU at epochs 2 and 3 (the
    # last epoch is always scored), the same BLEU in TensorBoard and bleu.jsonl.
    curves = read_run_curves(run_dir)
    for name in ("loss", "accuracy", "learning_rate", "val_loss", "val_accuracy"):
        assert curves[name].epochs == (1, 2, 3), name
    records = read_bleu_log(RunPaths(run_dir).bleu_log)
    assert [r["epoch"] for r in records] == [2, 3]
    assert [r["step"] for r in records] == [8, 12]
    assert curves["val_bleu"].epochs == (2, 3)
    np.testing.assert_allclose(curves["val_bleu"].values, [r["bleu"] for r in records], atol=0.01)
    # The rate logged at an epoch's end is the schedule at the optimizer's step count then
    # (4, 8, 12): past the 4-step warm-up, decaying.
    t = load_config(RunPaths(run_dir).config).training
    schedule = TransformerSchedule(32, warmup_steps=4, scale=t.learning_rate_scale)
    expected = [float(schedule(step)) for step in (4, 8, 12)]
    np.testing.assert_allclose(curves["learning_rate"].values, expected, rtol=1e-5)
    assert expected[0] > expected[1] > expected[2]

    sentence = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
    assert main(["plot", run_dir, "--sentence", sentence, "--beam-size", "1"]) == 0
    out = os.path.join(run_dir, "plots")  # the default --out
    written = capsys.readouterr().out.split()
    assert written == [os.path.join(out, f"{name}.png") for name in FIGURES]
    os.makedirs(PLOTS_DIR, exist_ok=True)
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) >= 300, path
        shutil.copy(path, os.path.join(PLOTS_DIR, "plot_command_" + os.path.basename(path)))

    # A damaged bleu.jsonl: one line naming the line, and a non-zero exit.
    with open(RunPaths(run_dir).bleu_log, "a") as f:
        f.write("{not json\n")
    capsys.readouterr()
    assert main(["plot", run_dir]) == 2
    assert "invalid line 3" in _one_error_line(capsys)
