"""The command line's options: global ones before or after the subcommand, and each
command's help showing the options and defaults of the tasks whose runs it takes."""

import inspect
import logging
import os
import re
from types import SimpleNamespace

import pytest

from keras_transformer.cli import main
from keras_transformer.constants import (
    DEFAULT_LENGTH_PENALTY,
    LOG_LEVELS,
    TRANSLATION_DECODING_DEFAULTS,
)
from keras_transformer.predictors import TextGenerator, Translator


def _help(capsys, monkeypatch, *command):
    """The `--help` of `command`, its whitespace collapsed (each option's help on one line
    before that, the terminal being wide)."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _option(help_text: str, flag: str) -> str:
    """The help of `flag`: `--flag METAVAR  help`, the help on the flag's line or (after a
    long flag) on the next one."""
    lines = [line.strip() for line in help_text.splitlines()] + [""]
    found = [i for i, line in enumerate(lines) if line.startswith(flag + " ")]
    assert len(found) == 1, help_text
    line, following = lines[found[0]], lines[found[0] + 1]
    if len(line.split()) == 2 and not following.startswith("-"):
        line += " " + following
    return line


def _run_dir(tmp_path, task: str) -> str:
    """A run directory that says its task (enough for the option checks, which come before
    the model is loaded)."""
    run = tmp_path / task
    run.mkdir()
    (run / "config.yaml").write_text(f"task: {task}\n", encoding="utf-8")
    return str(run)


# Global options.


@pytest.fixture
def logging_level(monkeypatch):
    """The level `main` configures logging with."""
    levels = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: levels.append(kwargs["level"]))
    return levels


@pytest.mark.parametrize(
    "before, after, expected",
    [
        ([], [], "INFO"),
        (["--log-level", "DEBUG"], [], "DEBUG"),
        ([], ["--log-level", "debug"], "DEBUG"),
        (["--log-level", "ERROR"], ["--log-level", "DEBUG"], "DEBUG"),
        (["--log-level", "WARNING"], [], "WARNING"),
    ],
    ids=["default", "before", "after_lower_case", "after_wins", "before_kept"],
)
def test_log_level_before_or_after_the_command(
    tmp_path, capsys, logging_level, before, after, expected
):
    run = str(tmp_path / "missing")
    assert main([*before, "translate", run, "Hallo.", *after]) == 2
    assert logging_level == [expected]
    assert "keras-transformer translate: error:" in capsys.readouterr().err


@pytest.mark.parametrize("position", ["before", "after"])
def test_a_bad_log_level_is_refused_naming_the_levels(capsys, position):
    bad = ["--log-level", "LOUD"]
    command = [*bad, "train"] if position == "before" else ["train", *bad]
    with pytest.raises(SystemExit) as exit_:
        main(command)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid choice: 'LOUD'" in err
    assert all(f"'{level}'" in err for level in LOG_LEVELS)


def test_every_command_help_lists_the_global_options(capsys, monkeypatch):
    for command in ("train", "tag", "average"):
        text = _help(capsys, monkeypatch, command)
        assert "global options (before or after the command):" in text
        assert _option(text, "--log-level").endswith(
            "Python logging level: DEBUG, INFO, WARNING, ERROR, CRITICAL, in any case "
            "(default: INFO)."
        )


def test_serve_log_level_takes_the_same_levels():
    from keras_transformer.serving.cli import build_arg_parser

    assert build_arg_parser().parse_args(["--log_level", "debug"]).log_level == "DEBUG"
    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--log_level", "LOUD"])


# Each command's help: the defaults of its tasks.


def test_generate_help_shows_the_generators_defaults(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "generate")
    assert "--max-length-a" not in text and "--max-length-b" not in text
    assert _option(text, "--length-penalty").endswith(f"(default: {DEFAULT_LENGTH_PENALTY}).")
    max_new_tokens = inspect.signature(TextGenerator).parameters["max_new_tokens"].default
    assert _option(text, "--max-new-tokens").endswith(f"(default: {max_new_tokens}).")
    assert "only;" not in text  # one task: no option is another task's


def test_translate_help_shows_the_translators_defaults(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "translate")
    assert TRANSLATION_DECODING_DEFAULTS == {
        "length_penalty": 1.0,
        "max_length_a": 1.2,
        "max_length_b": 10,
    }
    assert _option(text, "--length-penalty").endswith("(default: 1.0).")
    assert _option(text, "--max-length-a").endswith("(default: 1.2).")
    assert _option(text, "--max-length-b").endswith("(default: 10).")
    assert _option(text, "--no-repeat-ngram-size").endswith("its size n, 0 for off (default: 0).")
    assert "--max-new-tokens" not in text


@pytest.mark.parametrize("command", ["tag", "classify"])
def test_help_of_a_task_that_does_not_decode_has_no_search_options(capsys, monkeypatch, command):
    text = _help(capsys, monkeypatch, command)
    for flag in ("--beam-size", "--method", "--nbest", "--jit", "--max-new-tokens"):
        assert flag not in text
    assert "decoding" not in text
    assert _option(text, "--batch-size").endswith("(default: 64).")


def test_predict_and_export_help_give_the_defaults_per_task(capsys, monkeypatch):
    for command in ("predict", "export"):
        text = _help(capsys, monkeypatch, command)
        assert "decoding (translation and language_modeling runs):" in text
        assert _option(text, "--length-penalty").endswith(
            "(default: 1.0 for translation, 0.6 for language_modeling)."
        )
        assert _option(text, "--max-length-a").endswith("(translation only; default: 1.2).")
        assert _option(text, "--max-new-tokens").endswith("(language_modeling only; default: 50).")
        assert _option(text, "--beam-size").endswith("Beam size (default: 4).")
    assert "--batch-size" not in text  # an export's batches are TF Serving's


def test_export_help_names_both_formats(capsys, monkeypatch):
    from keras_transformer.constants import CTRANSLATE2_QUANTIZATIONS

    text = _help(capsys, monkeypatch, "export")
    assert _option(text, "--format").endswith("(default: savedmodel)")
    assert f"--quantization {{{','.join(CTRANSLATE2_QUANTIZATIONS)}}}" in text
    assert _option(text, "--output-dir").endswith("(--format ctranslate2; required)")
    assert _option(text, "--base-path").endswith("(required with --format savedmodel)")


def test_evaluate_help_gives_the_defaults_of_each_tasks_evaluation(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "evaluate")
    # Only a translation decodes to be scored; the other tasks score with Keras.
    assert "decoding (translation runs):" in text
    assert "--max-new-tokens" not in text
    assert _option(text, "--max-length-a").endswith("(default: 1.2).")
    assert _option(text, "--batch-size").endswith(
        "(default: 64 for translation, the run's data.batch_size or data.tokens_per_batch "
        "for tagging, classification and language_modeling)."
    )


# Options a run does not take: refused in one line, naming them, before the model loads.


@pytest.mark.parametrize(
    "command, task, option, owner",
    [
        (["generate"], "language_modeling", ["--max-length-a", "2"], "TextGenerator"),
        (["tag"], "tagging", ["--beam-size", "2"], "TextTagger"),
        (["predict"], "translation", ["--max-new-tokens", "3"], "Translator"),
        (["evaluate"], "language_modeling", ["--beam-size", "2"], "evaluation"),
        (["evaluate"], "translation", ["--max-new-tokens", "3"], "evaluation"),
    ],
    ids=["generate", "tag", "predict", "evaluate_lm", "evaluate_translation"],
)
def test_an_option_the_run_does_not_take_is_refused(tmp_path, capsys, command, task, option, owner):
    run = _run_dir(tmp_path, task)
    texts = [] if command == ["evaluate"] else ["x"]
    assert main([*command, run, *texts, *option]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"keras-transformer {command[0]}: error: Received {option[0]} for a {task} run "
        f"({run}), whose {owner} does not take it."
    ]


@pytest.mark.parametrize(
    "command, task", [("translate", "translation"), ("generate", "language_modeling")]
)
def test_nbest_below_one_is_refused_before_the_model_loads(tmp_path, capsys, command, task):
    # It printed the plain line (--nbest 0 read as no --nbest) with rc 0.
    assert main([command, _run_dir(tmp_path, task), "x", "--nbest", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"keras-transformer {command}: error: Received an invalid value for --nbest, expected "
        "a positive integer. Received: --nbest=0"
    ]


def test_predictors_decode_with_their_own_defaults():
    model = SimpleNamespace(pad_id=0, max_length=32)
    tokenizer = SimpleNamespace(pad_id=0, bos_id=2, eos_id=3)
    decoder = Translator(model, tokenizer, tokenizer).decoder
    assert (decoder.length_penalty, decoder.max_length_a, decoder.max_length_b) == (1.0, 1.2, 10)
    assert Translator(model, tokenizer, tokenizer, max_length_b=3).decoder.max_length_b == 3
    generator = TextGenerator(model, tokenizer, max_new_tokens=7)
    assert generator.decoder.length_penalty == DEFAULT_LENGTH_PENALTY
    assert (generator.decoder.max_length_a, generator.decoder.max_length_b) == (1.0, 7)
    with pytest.raises(ValueError, match="Received `max_length_a`"):
        TextGenerator(model, tokenizer, max_length_a=2.0)


# train.


def test_train_help_names_the_packaged_configs(capsys, monkeypatch):
    from keras_transformer.config import CONFIGS_DIR, load_config

    text = " ".join(_help(capsys, monkeypatch, "train").split())
    listed = re.search(r"the name of a packaged one: ([\w, ]+)\.", text).group(1).split(", ")
    files = sorted(name for name in os.listdir(CONFIGS_DIR) if name.endswith(".yaml"))
    assert [f"{name}.yaml" for name in listed] == files
    assert "synthetic_sentiment" not in text
    for name in listed:
        assert load_config(name).task  # each name is one that --config takes
