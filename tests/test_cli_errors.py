"""A user's mistake on the command line: one line on stderr, exit status 2, no traceback
(unless `--log-level DEBUG`)."""

import subprocess
import sys

import pytest

from keras_transformer.cli import main


def _train(tmp_path, source, target):
    return [
        "train",
        "--config",
        "multi30k_de_en",
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        f"data.source={source}",
        "--set",
        f"translation.target_path={target}",
        "--set",
        "data.validation_split=null",
    ]


def _one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("keras-transformer ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keras-transformer {command}: error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "source_bytes, target_bytes, expected",
    [
        (b"Ein Hund.\nZwei Katzen.\n", b"A dog.\n", "the same number of lines"),
        (b"Ein Hund.\n\xff\xfe kaputt\n", b"A dog.\nBroken.\n", "UTF-8"),
    ],
    ids=["line_counts", "not_utf8"],
)
def test_bad_corpus(tmp_path, capsys, source_bytes, target_bytes, expected):
    source, target = tmp_path / "train.de", tmp_path / "train.en"
    source.write_bytes(source_bytes)
    target.write_bytes(target_bytes)
    assert main(_train(tmp_path, source, target)) == 2
    assert expected in _one_error_line(capsys, "train")


def test_missing_corpus_file(tmp_path, capsys):
    target = tmp_path / "train.en"
    target.write_text("A dog.\n", encoding="utf-8")
    assert main(_train(tmp_path, tmp_path / "missing.de", target)) == 2
    assert "missing.de" in _one_error_line(capsys, "train")


def test_incomplete_run_directory(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["translate", str(tmp_path / "run"), "Hallo."]) == 2
    assert "incomplete run directory" in _one_error_line(capsys, "translate")
    assert main(["export", str(tmp_path / "run"), "--base-path", str(tmp_path)]) == 2
    assert "model.keras" in _one_error_line(capsys, "export")


def test_bad_decoding_option(tmp_path, capsys):
    from keras_transformer import Transformer
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.tokenization import train_sentencepiece

    tokenizer = train_sentencepiece(
        ["Ein Hund läuft.", "A dog runs.", "Zwei Katzen.", "Two cats."] * 20,
        vocab_size=30,
        byte_fallback=False,
    )
    model = Transformer.from_preset("tiny", tokenizer.vocab_size, tokenizer.vocab_size)
    model.build(((None, None), (None, None)))
    paths = RunPaths(str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    model.save(paths.model)
    tokenizer.save(paths.source_tokenizer)
    tokenizer.save(paths.target_tokenizer)
    assert main(["translate", paths.root, "Hallo.", "--beam-size", "0"]) == 2
    assert "argument `beam_size`" in _one_error_line(capsys, "translate")


def test_debug_shows_the_traceback(tmp_path):
    # `--log-level` goes before the command or after it.
    command = [sys.executable, "-m", "keras_transformer.cli", "translate", str(tmp_path), "Hallo."]
    debug = ["--log-level", "DEBUG"]
    quiet, before, after = (
        subprocess.run(arguments, capture_output=True, text=True, timeout=120)
        for arguments in (command, command[:3] + debug + command[3:], command + debug)
    )
    assert quiet.returncode == before.returncode == after.returncode == 2
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in before.stderr and "Traceback" in after.stderr
    for stderr in (quiet.stderr, before.stderr, after.stderr):
        assert "keras-transformer translate: error: Received an incomplete run" in stderr
