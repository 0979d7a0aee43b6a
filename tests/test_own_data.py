"""Training on one's own data: local files with and without validation files, a holdout,
`train()` on a `tf.data.Dataset` of one's own, and the encoding saved with the model."""

import gzip
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import keras
import pytest
import tensorflow as tf
from crash import CrashAt

from keras_transformer.cli import main
from keras_transformer.config import load_config
from keras_transformer.predictors import Translator
from keras_transformer.run_dir import RunPaths
from keras_transformer.runner import evaluate_run, train
from keras_transformer.training.averaging import average_weights
from keras_transformer.training.budget import epoch_weight_files
from keras_transformer.training.tokenizer_files import settings_file

pytestmark = pytest.mark.slow

LINES = 300
SENTENCES = ["Ein Hund läuft durch den Schnee.", "Zwei Männer stehen vor einem Haus."]


def _read(path, count):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, multi30k_dir):
    """The first lines of Multi30k's training files as one's own line-aligned files."""
    root = tmp_path_factory.mktemp("corpus")
    paths = {}
    for lang in ("de", "en"):
        lines = _read(os.path.join(multi30k_dir, f"train.{lang}.gz"), LINES)
        paths[lang] = str(root / f"train.{lang}")
        with open(paths[lang], "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return paths


def _config(run_dir, corpus=None, *overrides):
    return load_config(None, _overrides(run_dir, corpus, *overrides))


def _overrides(run_dir, corpus=None, *overrides):
    values = [
        f"training.run_dir={run_dir}",
        "data.vocab_size=400",
        "data.batch_size=16",
        "model.num_encoder_layers=1",
        "model.num_decoder_layers=1",
        "model.d_model=32",
        "model.num_heads=2",
        "model.d_ff=64",
        "model.max_length=40",
        "translation.max_source_length=40",
        "translation.max_target_length=40",
        "training.epochs=1",
        "training.steps_per_epoch=3",
        "training.warmup_steps=1",
        "training.verbose=0",
        *overrides,
    ]
    if corpus is not None:
        values += [f"data.source={corpus['de']}", f"translation.target_path={corpus['en']}"]
    return values


@pytest.fixture(scope="module")
def holdout_run(corpus, tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("holdout") / "run")
    logger = logging.getLogger("keras_transformer")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        result = train(_config(run_dir, corpus, "data.validation_holdout=40"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return result, [r.getMessage() for r in records]


def test_a_holdout_is_the_validation_data_of_training_and_evaluation(holdout_run):
    result, messages = holdout_run
    assert any(f"the last 40 of the {LINES} examples" in m for m in messages), messages
    assert "val_loss" in result.history.history
    scored = evaluate_run(result.run_dir, "validation", beam_size=1, max_length=8)
    assert scored.num_sentences == 40
    assert "holdout" in scored.data


def _contents(root) -> dict[str, bytes]:
    """Every file under `root`, by relative path."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def test_a_finished_run_is_not_trained_again_and_keeps_its_files(holdout_run, corpus):
    result, _ = holdout_run
    paths = result.paths
    assert os.path.isfile(paths.model) and not os.path.exists(paths.backup)
    before = _contents(paths.root)
    # The same config again, and one that would end sooner (whose per-epoch weights would
    # have sat beside the finished run's, and been averaged with them).
    for overrides in ([], ["training.average_last=2", "training.steps_per_epoch=2"]):
        config = _config(result.run_dir, corpus, "data.validation_holdout=40", *overrides)
        with pytest.raises(ValueError, match="holds a finished run") as error:
            train(config)
        assert paths.model in str(error.value)
        assert "Expected a new run directory" in str(error.value)
    assert _contents(paths.root) == before  # nothing written, nothing removed


def test_an_interrupted_run_averages_to_a_model_and_resumes_only_as_its_own_model(corpus, tmp_path):
    paths = RunPaths(str(tmp_path / "run"))
    interrupted = ["training.epochs=2", "training.backup_freq=1"]
    with pytest.raises(KeyboardInterrupt):
        train(_config(paths.root, corpus, *interrupted), extra_callbacks=[CrashAt(4)])
    assert os.path.isdir(paths.backup) and not os.path.exists(paths.model)
    # No model to translate with yet: the error says how to get one.
    with pytest.raises(FileNotFoundError, match="interrupted") as error:
        Translator.from_run_dir(paths.root)
    assert f"keras-transformer average {paths.root} --last N" in str(error.value)
    # Its first epoch's weights as a model, before the run's end: built from its config.
    assert main(["average", paths.root, "--last", "1"]) == 0
    model = keras.models.load_model(paths.model)
    averaged = model.get_weights()
    model.load_weights(os.path.join(paths.checkpoints, "epoch-001.weights.h5"))
    assert all((a == b).all() for a, b in zip(averaged, model.get_weights(), strict=True))
    before = _contents(paths.root)
    # Another model: one whose weights would not fit the backup, two whose weights would
    # (4 heads of 8 where the run trained 2 of 16; sources without the EOS it trained on),
    # refused before anything is written; another optimizer (EMA adds state: Keras would
    # only warn and train on from step 0 of a fresh optimizer), refused by the restore,
    # before the first step.
    for override, named, match in [
        ("model.d_model=48", "model.d_model=48 (the run's: 32)", "model differs"),
        ("model.num_heads=4", "model.num_heads=4 (the run's: 2)", "model differs"),
        (
            "translation.source_eos=false",
            "translation.source_eos=False (the run's: True)",
            "model differs",
        ),
        ("training.use_ema=true", "training.use_ema=True (the run's: False)", "does not fit"),
    ]:
        with pytest.raises(ValueError, match=match) as error:
            train(_config(paths.root, corpus, *interrupted, override))
        assert named in str(error.value)
        assert f"--config {paths.config}" in str(error.value)
        # Its config.yaml, backup and every other file as they were (Keras' TensorBoard
        # callback opens its writer, an events file of no events, before the restore).
        after = _contents(paths.root)
        assert {name: after[name] for name in before} == before
        assert all(name.startswith("logs" + os.sep) for name in set(after) - set(before))
    # The config the run saved resumes it, a training-only option changed: the steps left
    # of its two epochs; config.yaml is then the rerun's.
    result = train(load_config(paths.config, ["model.remat=true"]))
    assert int(result.model.optimizer.iterations) == 2 * 3
    assert os.path.isfile(paths.model) and not os.path.exists(paths.backup)
    end = keras.models.load_model(paths.model).get_weights()  # the end's model replaced it
    assert not all((a == b).all() for a, b in zip(averaged, end, strict=True))
    assert load_config(paths.config).model.remat


# Trains `load_config(None, argv[1])`, writing the index of each step it starts to argv[2].
_STEPPING_RUN = """
import json, sys
import keras
from keras_transformer.config import load_config
from keras_transformer.runner import train

class Steps(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        with open(sys.argv[2], "w") as f:
            f.write(str(batch))

train(load_config(None, json.loads(sys.argv[1])), extra_callbacks=[Steps()])
"""


def _last_step(marker) -> int:
    """The step the child wrote last (-1 before any); read once, as the child truncates the
    file before each write and a second read may find it empty."""
    text = marker.read_text() if marker.exists() else ""
    return int(text) if text.strip() else -1


def test_sigterm_backs_the_run_up_at_the_end_of_its_step_and_ends_it(corpus, tmp_path, caplog):
    paths = RunPaths(str(tmp_path / "run"))
    # No backup before the epoch's end but the one SIGTERM asks for.
    overrides = _overrides(
        paths.root, corpus, "training.steps_per_epoch=100", "training.backup_freq=1000"
    )
    marker = tmp_path / "step"
    process = subprocess.Popen(
        [sys.executable, "-c", _STEPPING_RUN, json.dumps(overrides), str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while _last_step(marker) < 3:
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the run made no 3 steps in 240 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM, stderr[-3000:]  # ended by the signal
    assert "Received SIGTERM" in stderr
    state = json.loads((tmp_path / "run" / "backup" / "resume_state.json").read_text())
    assert state["epoch"] == 0 and 3 <= state["steps"] < 100, state
    assert not os.path.exists(paths.model)
    # Resumed from the step SIGTERM ended, to the epoch's 100 steps.
    with caplog.at_level(logging.INFO, logger="keras_transformer"):
        result = train(_config(paths.root, corpus, "training.steps_per_epoch=100"))
    assert f"Restored the backup of epoch 1 after {state['steps']} step(s)." in caplog.text
    assert int(result.model.optimizer.iterations) == 100


class _KilledAtTrainEnd(keras.callbacks.Callback):
    """Raises when `fit` ends, before the run saves its model, as a killed process would
    stop (after the backup callback's own end, which deleted the backup in Keras' order)."""

    def on_train_end(self, logs=None):
        raise KeyboardInterrupt("killed before the model was saved")


def test_a_run_killed_before_saving_its_model_saves_it_when_run_again(corpus, tmp_path):
    paths = RunPaths(str(tmp_path / "run"))
    config = _config(paths.root, corpus, "training.epochs=2", "training.average_last=2")
    with pytest.raises(KeyboardInterrupt):
        train(config, extra_callbacks=[_KilledAtTrainEnd()])
    # The backup stays until the model is saved (a run without either trained anew).
    assert os.path.isdir(paths.backup) and not os.path.exists(paths.model)
    result = train(config)
    assert result.history.epoch == []  # its backup was taken at the end of its last epoch
    assert int(result.model.optimizer.iterations) == 2 * 3
    assert os.path.isfile(paths.model) and not os.path.exists(paths.backup)
    saved = keras.models.load_model(paths.model)
    averaged = average_weights(
        keras.models.load_model(paths.model), epoch_weight_files(paths.checkpoints)
    )
    assert len(epoch_weight_files(paths.checkpoints)) == 2
    assert all(
        (a == b).all() for a, b in zip(saved.get_weights(), averaged.get_weights(), strict=True)
    )


def test_a_run_that_ended_early_then_was_killed_is_not_trained_again(corpus, tmp_path):
    """Ended by its time budget after its first step (early stopping ends `fit` alike), then
    killed before saving: the rerun trains nothing more (it resumed at the next epoch with a
    fresh budget, or patience), and saves the model."""
    paths = RunPaths(str(tmp_path / "run"))
    config = _config(paths.root, corpus, "training.epochs=4", "training.max_minutes=1e-6")
    with pytest.raises(KeyboardInterrupt):
        train(config, extra_callbacks=[_KilledAtTrainEnd()])
    result = train(config)
    assert result.history.epoch == []
    assert int(result.model.optimizer.iterations) < 4 * 3 and os.path.isfile(paths.model)


def test_the_run_directory_refuses_other_tokenizer_settings_and_keeps_its_files(
    holdout_run, corpus, tmp_path
):
    result, _ = holdout_run
    saved = json.loads(open(settings_file(result.paths), encoding="utf-8").read())
    assert saved["data.vocab_size"] == 400 and saved["data.validation_holdout"] == 40
    assert (saved["data.source"], saved["translation.target_path"]) == (corpus["de"], corpus["en"])
    # The run as if it had stopped before saving its model (a finished run is refused first).
    paths = RunPaths(str(tmp_path / "stopped"))
    shutil.copytree(result.run_dir, paths.root)
    os.remove(paths.model)
    files = (paths.config, settings_file(paths))
    before = [open(f, "rb").read() for f in files]
    swapped = {"de": corpus["en"], "en": corpus["de"]}  # the corpus the other way round
    swapped_named = [f"data.source={corpus['en']!r}", f"translation.target_path={corpus['de']!r}"]
    for run_corpus, overrides, named in [
        (corpus, ["data.vocab_size=300"], ["data.vocab_size=300 (the tokenizers': 400)"]),
        (swapped, [], swapped_named),
    ]:
        config = _config(paths.root, run_corpus, "data.validation_holdout=40", *overrides)
        with pytest.raises(ValueError, match="tokenizer settings differ") as error:
            train(config)
        for text in named:
            assert text in str(error.value)
    # Refused before anything was written: the run's config and tokenizers stay.
    assert [open(f, "rb").read() for f in files] == before
    assert not os.path.exists(paths.model)


def test_files_without_validation_train_without_it_and_say_so(corpus, tmp_path, caplog):
    run_dir = str(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        result = train(_config(run_dir, corpus))
    assert "No validation data" in caplog.text
    assert "data.validation_holdout" in caplog.text
    assert "val_loss" not in result.history.history
    # Files have no splits: their "test" or "validation" split would be training data.
    for split in ("test", "validation"):
        with pytest.raises(ValueError, match="--source-file FILE --reference-file FILE"):
            evaluate_run(run_dir, split, beam_size=1)


def test_nothing_is_written_before_the_data_is_found(tmp_path):
    run_dir = tmp_path / "run"
    missing = {"de": str(tmp_path / "missing.de"), "en": str(tmp_path / "missing.en")}
    with pytest.raises(FileNotFoundError):
        train(_config(str(run_dir), missing))
    assert not run_dir.exists()


def test_the_encoding_travels_with_the_model(holdout_run, tmp_path):
    """A model and tokenizers copied without `config.yaml` encode sources as in training
    (the run trained with `translation.source_eos: true`, the default)."""
    result, _ = holdout_run
    paths, bare = RunPaths(result.run_dir), RunPaths(str(tmp_path / "bare"))
    os.makedirs(bare.root)
    shutil.copy(paths.model, bare.model)
    shutil.copytree(os.path.dirname(paths.source_tokenizer), os.path.dirname(bare.source_tokenizer))
    assert not os.path.exists(bare.config)
    assert keras.saving.load_model(bare.model).source_eos is True

    options = {"beam_size": 1, "max_length": 10}
    trained = Translator.from_run_dir(result.run_dir, **options)
    copied = Translator.from_run_dir(bare.root, **options)
    assert copied.source_eos is trained.source_eos is True
    assert copied.translate(SENTENCES) == trained.translate(SENTENCES)
    # Built by hand from the loaded model, too.
    assert Translator(copied.model, copied.source_tokenizer, copied.target_tokenizer).source_eos


def test_train_takes_a_dataset_and_returns_what_translates(corpus, tmp_path):
    with open(corpus["de"], encoding="utf-8") as f:
        sources = f.read().splitlines()
    with open(corpus["en"], encoding="utf-8") as f:
        targets = f.read().splitlines()
    pairs = tf.data.Dataset.from_tensor_slices((sources[:260], targets[:260]))
    held_out = tf.data.Dataset.from_tensor_slices((sources[260:], targets[260:]))
    result = train(_config(str(tmp_path / "run")), train_data=pairs, validation_data=held_out)
    assert "val_loss" in result.history.history
    source_tokenizer, target_tokenizer = result.tokenizers
    assert source_tokenizer.vocab_size == target_tokenizer.vocab_size <= 400
    translator = result.predictor(beam_size=1, max_length=6)
    assert isinstance(translator, Translator)
    translations = translator.translate(SENTENCES)
    assert len(translations) == 2 and all(isinstance(t, str) for t in translations)
    assert os.path.exists(result.paths.model)
    # Its config names Multi30k, which it never saw: scored only on data given again.
    with pytest.raises(ValueError, match="trained on data given to `train`"):
        evaluate_run(result.run_dir, "test")
    # A dataset named by an override is data given too, in each form load_config takes.
    for overrides in ({"data.source": "multi30k"}, "data.source=multi30k"):
        named = evaluate_run(result.run_dir, "test", overrides=overrides, max_examples=3)
        assert named.num_sentences == 3
    scored = evaluate_run(result.run_dir, "test", data=held_out, beam_size=1)
    assert scored.num_sentences == len(sources) - 260
    assert 0.0 <= scored.scores["bleu"] <= 100.0


def test_train_refuses_validation_data_without_training_data(tmp_path):
    pairs = tf.data.Dataset.from_tensor_slices((["a"], ["b"]))
    with pytest.raises(ValueError, match="`validation_data` without `train_data`"):
        train(_config(str(tmp_path / "run")), validation_data=pairs)
    assert not (tmp_path / "run").exists()


# The README's "Train on your own corpus" commands, as written, on a small corpus; `train`
# gets a smaller model and a few steps on top.
README = os.path.join(os.path.dirname(__file__), "..", "README.md")
SMALL_RUN = [
    "data.vocab_size=400",
    "data.tokens_per_batch=512",
    "model.num_encoder_layers=1",
    "model.num_decoder_layers=1",
    "model.d_model=32",
    "model.num_heads=2",
    "model.d_ff=64",
    "training.epochs=1",
    "training.steps_per_epoch=3",
    "training.warmup_steps=1",
    "training.max_minutes=null",
    "training.verbose=0",
    "translation.bleu_every=null",
]


def _readme_commands():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Train on your own corpus", 1)[1].split("\n## ", 1)[0]
    layout, commands = re.findall(r"```(?:text|bash)\n(.*?)```", section, flags=re.S)[:2]
    files = [word for line in layout.splitlines() for word in line.split("#")[0].split()]
    lines = commands.replace("\\\n", " ").splitlines()
    return files, [shlex.split(line) for line in lines if line.strip()]


def test_the_readme_own_corpus_commands_run(multi30k_dir, tmp_path):
    files, commands = _readme_commands()
    assert [c[:2] for c in commands] == [
        ["keras-transformer", "train"],
        ["keras-transformer", "evaluate"],
        ["keras-transformer", "translate"],
        ["keras-transformer", "export"],
    ]
    # The layout's files, from Multi30k's: 300 training, 40 validation and 20 test pairs.
    counts = {"train": (0, 300), "valid": (300, 340), "test": (340, 360)}
    lines = {
        lang: _read(os.path.join(multi30k_dir, f"train.{lang}.gz"), 360) for lang in ("de", "en")
    }
    for name in files:
        start, end = counts[os.path.basename(name).split(".")[0]]
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(lines[name.rsplit(".", 1)[1]][start:end]) + "\n", "utf-8")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    outputs = []
    for command in commands:
        args = [sys.executable, "-m", "keras_transformer.cli", *command[1:]]
        if command[1] == "train":
            args += [f"--set={override}" for override in SMALL_RUN]
        done = subprocess.run(
            args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (command, done.stderr[-3000:])
        outputs.append(done)
    assert os.path.exists(tmp_path / "runs" / "mine" / "model.keras")
    assert "bleu" in outputs[1].stdout.lower()  # the test files' score
    assert len(outputs[2].stdout.strip().splitlines()) == 1  # one translation
    assert os.path.isdir(tmp_path / "exports" / "transformer" / "1")
