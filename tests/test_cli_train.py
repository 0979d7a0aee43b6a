"""`keras-transformer train` end to end on Multi30k (tiny overrides)."""

import argparse
import os
import shutil

import numpy as np
import pytest
import yaml

from keras_transformer import Transformer
from keras_transformer.cli import main
from keras_transformer.run_dir import RunPaths, load_run


def _args(run_dir, multi30k_dir, tfds_dir, *extra):
    overrides = [
        f"training.run_dir={run_dir}",
        f"translation.local_dir={multi30k_dir}",
        f"data.data_dir={tfds_dir}",
        "data.max_train_examples=2000",
        "data.max_validation_examples=64",
        "data.vocab_size=1000",
        "data.batch_size=32",
        "model.num_encoder_layers=1",
        "model.num_decoder_layers=1",
        "model.d_model=64",
        "model.d_ff=128",
        "training.epochs=1",
        "training.steps_per_epoch=6",
        "training.warmup_steps=1",  # the recipe's linear decay needs more steps than warmup
        "training.validation_steps=2",
        "training.backup_freq=3",
        "training.verbose=0",
        *extra,
    ]
    args = ["train", "--config", "multi30k_de_en"]
    for override in overrides:
        args += ["--set", override]
    return args


@pytest.mark.slow
def test_cli_train_writes_a_complete_run_directory(tmp_path, multi30k_dir, capsys):
    run_dir, tfds_dir = str(tmp_path / "run"), str(tmp_path / "tfds")
    assert main(_args(run_dir, multi30k_dir, tfds_dir)) == 0
    paths = RunPaths(run_dir)
    for required in (
        paths.config,
        paths.model,
        os.path.join(paths.source_tokenizer, "spm.model"),
        os.path.join(paths.target_tokenizer, "spm.model"),
        os.path.join(paths.checkpoints, "last.weights.h5"),
        os.path.join(paths.checkpoints, "best.weights.h5"),
    ):
        assert os.path.isfile(required), required
    events = [
        name
        for _, _, files in os.walk(paths.logs)
        for name in files
        if name.startswith("events.out.tfevents.")
    ]
    assert len(events) >= 2, events  # TensorBoard: train and validation
    assert not os.path.exists(paths.backup)  # the backup is removed once training is done
    with open(paths.config) as f:
        saved = yaml.safe_load(f)
    assert saved["training"]["epochs"] == 1 and saved["data"]["vocab_size"] == 1000

    model, source_tokenizer, target_tokenizer = load_run(run_dir)
    assert type(model) is Transformer
    assert source_tokenizer.vocab_size == 1000 == model.target_vocab_size
    ids = source_tokenizer.tokenize(["Ein Hund läuft."]).to_tensor()
    logits = model((ids, np.array([[2]], "int32")))
    assert logits.shape == (1, 1, 1000)

    # The command again is refused in one line: the run is finished, and nothing is written.
    tokenizer_file = os.path.join(paths.source_tokenizer, "spm.model")
    kept = (tokenizer_file, paths.model, paths.config)
    before = [os.stat(path).st_mtime_ns for path in kept]
    capsys.readouterr()
    assert main(_args(run_dir, multi30k_dir, tfds_dir, "training.steps_per_epoch=2")) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("keras-transformer train: error: Received a run directory that ")
    assert "holds a finished run" in error and "\n" not in error
    assert [os.stat(path).st_mtime_ns for path in kept] == before
    # Without the files the error names, it trains again from new weights on the same
    # tokenizers instead of training new ones.
    os.remove(paths.model)
    shutil.rmtree(paths.checkpoints)
    shutil.rmtree(paths.logs)
    if os.path.exists(paths.bleu_log):
        os.remove(paths.bleu_log)
    assert main(_args(run_dir, multi30k_dir, tfds_dir, "training.steps_per_epoch=2")) == 0
    assert os.stat(tokenizer_file).st_mtime_ns == before[0]
    assert os.path.isfile(paths.model)


def test_cli_train_rejects_bad_config_values(tmp_path, capsys):
    # One line on stderr, at every --log-level (it was a log record, silent at CRITICAL).
    for level in ("INFO", "CRITICAL"):
        args = ["--log-level", level, "train", "--config", "multi30k_de_en"]
        assert main([*args, "--set", "training.epochs=0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("keras-transformer train: error: Received an invalid value for ")
        assert "`training.epochs`" in err
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "No config file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["exp #2", "2024-05-01", "yes", "runs/a: b"])
def test_cli_train_takes_the_run_dir_as_written(tmp_path, name):
    """--run-dir is a path, not a YAML value: a '#' is no comment, a date no date."""
    from keras_transformer.commands.train import experiment_config

    run_dir = str(tmp_path / name)
    args = argparse.Namespace(config="multi30k_de_en", overrides=[], run_dir=run_dir)
    assert experiment_config(args).training.run_dir == run_dir


def test_cli_train_refuses_a_blank_run_dir(capsys):
    assert main(["train", "--config", "multi30k_de_en", "--run-dir", " "]) == 2
    assert "expected a folder path. Received: --run-dir=' '" in capsys.readouterr().err
