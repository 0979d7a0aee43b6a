"""A user's mistake on the command line: one line on stderr, exit status 2, no traceback
(unless `--log-level DEBUG`)."""

import io
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


@pytest.fixture
def hand_run(tmp_path):
    """A run directory saved by hand (a translation run with the defaults): a tiny model,
    its tokenizers and one epoch's weights, untrained."""
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
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    model.save(paths.model)
    model.save_weights(f"{paths.checkpoints}/epoch-001.weights.h5")
    tokenizer.save(paths.source_tokenizer)
    tokenizer.save(paths.target_tokenizer)
    return paths.root


def test_bad_decoding_option(hand_run, capsys):
    assert main(["translate", hand_run, "Hallo.", "--beam-size", "0"]) == 2
    assert "argument `beam_size`" in _one_error_line(capsys, "translate")


def test_file_arguments_are_refused_in_one_line_before_any_decoding(
    hand_run, tmp_path, capsys, monkeypatch
):
    from keras_transformer.predictors import Translator

    def not_reached(*args, **kwargs):
        raise AssertionError("decoded before the arguments were checked")

    monkeypatch.setattr(Translator, "translate", not_reached)
    folder, missing = tmp_path / "folder", str(tmp_path / "missing.txt")
    folder.mkdir()
    sources, references = tmp_path / "test.de", tmp_path / "test.en"
    sources.write_text("Ein Hund.\n", encoding="utf-8")
    references.write_text("A dog.\n", encoding="utf-8")
    not_utf8 = tmp_path / "latin1.de"
    not_utf8.write_bytes("Ein Hund.\nMädchen.\n".encode("latin-1"))
    files = ["--source-file", str(sources), "--reference-file", str(references)]
    for command, expected in [
        (["translate", hand_run, "--input", missing], "No such file: " + missing),
        (["translate", hand_run, "--input", str(folder)], "a folder, expected a file to read"),
        (["translate", hand_run, "--input", str(not_utf8)], "not UTF-8 on line 2"),
        (["translate", hand_run, "x", "--output", str(folder)], "a folder, expected a file to"),
        (["evaluate", hand_run, "--source-file", missing, "--reference-file", missing], missing),
        (["evaluate", hand_run, *files, "--output", str(folder)], "expected a file to write"),
        (["evaluate", hand_run, *files, "--details", str(folder)], "expected a file to write"),
        (["evaluate", hand_run, *files, "--scores-json", str(folder)], "a file to write"),
        (["average", hand_run, "--last", "1", "--output", str(folder)], "a file to write"),
        # Before the averaging: an .h5 model did not load back, other names failed in save.
        (["average", hand_run, "--last", "1", "--output", f"{tmp_path}/a.h5"], "ending in .keras"),
        (["export", hand_run, "--base-path", str(sources)], "test.de is not a directory"),
        (["translate", str(tmp_path / "nope"), "x"], "run directory that does not exist"),
        (["average", str(tmp_path / "nope"), "--last", "1"], "does not exist: "),
    ]:
        assert main(command) == 2, command
        assert expected in _one_error_line(capsys, command[0]), command
    # stdin is read as UTF-8 strictly too (Python's own stdin would pass surrogates on).
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Ein Hund.\n\xff\n")))
    assert main(["translate", hand_run]) == 2
    assert "UTF-8 text in stdin" in _one_error_line(capsys, "translate")


def test_average_writes_its_model_into_a_new_folder(hand_run, tmp_path, capsys):
    import keras

    output = tmp_path / "new" / "folder" / "averaged.keras"
    assert main(["average", hand_run, "--last", "1", "--output", str(output)]) == 0
    assert keras.models.load_model(output).count_params() > 0
    assert str(output) in capsys.readouterr().out


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
