"""`train` on one's own labelled data: the examples' structure, the label names and the
label ids are checked, and an interrupted run resumes only on its own labels."""

import os

import pytest
import tensorflow as tf
from crash import CrashAt
from task_configs import RECIPES, TINY_TRAINING, task_of

from keras_transformer.config import load_config
from keras_transformer.data import synthetic
from keras_transformer.data.task_sources import TaskData
from keras_transformer.run_dir import RunPaths
from keras_transformer.runner import train
from keras_transformer.tokenization import train_sentencepiece

WORDS = "the a dog cat runs sleeps big small red blue sees eats house tree river".split()
LABELS = ["negative", "positive"]
TAGS = ["DET", "NOUN", "VERB", "ADJ"]
TAG_OF = {"the": 0, "a": 0, "dog": 1, "cat": 1, "house": 1, "runs": 2, "sleeps": 2, "big": 3}


def _config(task, run_dir, *overrides):
    layers = "num_decoder_layers" if task == "language_modeling" else "num_encoder_layers"
    return load_config(
        RECIPES[task],
        [
            f"training.run_dir={run_dir}",
            "data.vocab_size=320",
            "data.batch_size=8",
            f"model.{layers}=1",
            f"{task}.max_length=32",
            *TINY_TRAINING,
            *overrides,
        ],
    )


def _texts(count=64):
    return [
        " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 5))
        for i in range(count)
    ]


def _classified(ids=None):
    texts = _texts()
    ids = [int("dog" in t) for t in texts] if ids is None else ids
    return tf.data.Dataset.from_tensor_slices((texts, ids))


def _sentences(count=64):
    return [
        [list(TAG_OF)[(i * 5 + k) % len(TAG_OF)] for k in range(3 + i % 4)] for i in range(count)
    ]


def _tagged(sentences, tags):
    ragged = (tf.ragged.constant(sentences), tf.ragged.constant(tags, tf.int32))
    return tf.data.Dataset.from_tensor_slices(ragged).map(lambda words, ids: (words, ids))


@pytest.fixture(scope="module")
def tokenizer():
    words, _ = synthetic.synthetic_tagging("train[:300]")
    texts = [" ".join(w) for w in words] + _texts()
    return train_sentencepiece(
        texts, vocab_size=100, seed=0, byte_fallback=False, hard_vocab_limit=False
    )


def _batches(task, tokenizer, dataset, labels, origin):
    data = TaskData(dataset, tuple(labels), origin)
    return list(task.make_batches(data, (tokenizer, tokenizer), shuffle=False, batch_size=8))


@pytest.mark.parametrize("ids", [[0, 2], [-1, 0]])
def test_class_ids_outside_the_labels_stop_the_input_pipeline(tokenizer, ids):
    task = task_of("classification", 32)
    labels = [ids[i % 2] for i in range(64)]
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _batches(task, tokenizer, _classified(labels), LABELS, "validation_data")
    message = str(error.value)
    assert "label ids outside [0, 2) in validation_data" in message
    assert f"[{max(ids) if max(ids) >= 2 else min(ids)}]" in message  # the id at fault


@pytest.mark.parametrize("shift", [-1, 1])
def test_tag_ids_outside_the_labels_stop_the_input_pipeline(tokenizer, shift):
    task = task_of("tagging", 32)
    sentences = _sentences()
    tags = [[TAG_OF[w] + shift for w in s] for s in sentences]
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _batches(task, tokenizer, _tagged(sentences, tags), TAGS, "train_data")
    message = str(error.value)
    assert "tag ids outside [0, 4) in train_data" in message
    assert ("[-1]" if shift < 0 else "[4]") in message


@pytest.mark.parametrize("case", ["one_short_one_long", "short", "long"])
def test_a_sentence_of_more_or_fewer_tags_than_words_is_refused(tokenizer, case):
    task = task_of("tagging", 32)
    sentences = _sentences()
    tags = [[TAG_OF[w] for w in s] for s in sentences]
    if case != "long":  # one tag fewer in sentence 5 (one more in 6: the totals agree)
        tags[5] = tags[5][:-1]
    if case != "short":
        tags[6] = tags[6] + [0]
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _batches(task, tokenizer, _tagged(sentences, tags), TAGS, "train_data")
    message = str(error.value)
    assert "of train_data whose tags and words differ in number" in message
    words = len(sentences[5 if case != "long" else 6])
    tags_count = words - 1 if case != "long" else words + 1
    assert f"has] [{words}] [words but] [{tags_count}] [tags" in message


TEXTS = ["a dog runs", "the cat sleeps"]
STRUCTURES = {
    "classification": {
        "batched": tf.data.Dataset.from_tensor_slices((TEXTS, [0, 1])).batch(2),
        "text only": tf.data.Dataset.from_tensor_slices(TEXTS),
        "dict": tf.data.Dataset.from_tensor_slices({"text": TEXTS, "label": [0, 1]}),
        "float labels": tf.data.Dataset.from_tensor_slices((TEXTS, [0.0, 1.0])),
        "string labels": tf.data.Dataset.from_tensor_slices((TEXTS, ["neg", "pos"])),
    },
    "tagging": {
        "sentences": tf.data.Dataset.from_tensor_slices((TEXTS, [0, 1])),
        "string tags": _tagged([["a", "dog"], ["the"]], [[0, 1], [0]]).map(
            lambda words, tags: (words, tf.strings.as_string(tags))
        ),
    },
    "language_modeling": {
        "batched": tf.data.Dataset.from_tensor_slices(TEXTS).batch(2),
        "pairs": tf.data.Dataset.from_tensor_slices((TEXTS, TEXTS)),
        "dict": tf.data.Dataset.from_tensor_slices({"text": TEXTS}),
    },
}
EXPECTED = {
    "classification": "(text: str scalar, label: int scalar)",
    "tagging": "(words: str (W,), tags: int (W,))",
    "language_modeling": "of unbatched examples text: str scalar",
}


@pytest.mark.parametrize(
    "task,case", [(task, case) for task, cases in STRUCTURES.items() for case in cases]
)
@pytest.mark.parametrize("argument", ["train_data", "validation_data"])
def test_data_of_another_structure_is_refused_before_anything_is_written(
    tmp_path, task, case, argument
):
    run_dir = tmp_path / "run"
    good = {
        "classification": tf.data.Dataset.from_tensor_slices((TEXTS, [0, 1])),
        "tagging": _tagged([["a", "dog"], ["the"]], [[0, 1], [0]]),
        "language_modeling": tf.data.Dataset.from_tensor_slices(TEXTS),
    }[task]
    data = {"train_data": good, "validation_data": good, argument: STRUCTURES[task][case]}
    labels = None if task == "language_modeling" else ["x", "y"]
    with pytest.raises(ValueError) as error:
        train(_config(task, str(run_dir)), **data, labels=labels)
    message = str(error.value)
    assert f"argument `{argument}`" in message
    assert EXPECTED[task] in message
    assert f"Received: element_spec={STRUCTURES[task][case].element_spec}" in message
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "labels", [[0, 1], [1, 2], ["a", "a"], ["only"], "np", ["a", ""], ["a", "b\nc"], None]
)
def test_invalid_label_names_are_refused_before_anything_is_written(tmp_path, labels):
    run_dir = tmp_path / "run"
    data = TaskData(_classified(), labels, "mine") if labels is None else _classified()
    with pytest.raises(ValueError) as error:
        if labels is None:  # a TaskData of no labels
            train(_config("classification", str(run_dir)), train_data=data)
        else:
            train(_config("classification", str(run_dir)), train_data=data, labels=labels)
    message = str(error.value)
    assert "Received an invalid value for argument `" in message
    assert "at least two distinct, non-empty, single-line strings" in message
    assert f"labels={labels!r}" in message
    assert not run_dir.exists()


def test_labels_that_differ_between_the_arguments_are_refused(tmp_path):
    run_dir = tmp_path / "run"
    config = _config("classification", str(run_dir))
    mine = TaskData(_classified(), tuple(LABELS), "mine")
    other = TaskData(_classified(), ("bad", "good"), "other")
    with pytest.raises(ValueError, match="argument `validation_data`") as error:
        train(config, train_data=mine, validation_data=other)
    assert "('bad', 'good')" in str(error.value) and str(LABELS) in str(error.value)
    with pytest.raises(ValueError, match="argument `labels`, expected None or the labels"):
        train(config, train_data=mine, labels=["bad", "good"])
    with pytest.raises(ValueError, match="argument `labels`, expected None for a"):
        train(
            _config("language_modeling", str(run_dir)),
            train_data=tf.data.Dataset.from_tensor_slices(TEXTS),
            labels=LABELS,
        )
    with pytest.raises(ValueError, match="`labels` without `train_data`"):
        train(config, labels=LABELS)
    assert not run_dir.exists()


def _contents(root):
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def test_an_interrupted_run_resumes_only_on_its_own_labels(tmp_path):
    paths = RunPaths(str(tmp_path / "run"))
    interrupted = ["training.epochs=2", "training.backup_freq=1"]
    config = _config("classification", paths.root, *interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(config, train_data=_classified(), labels=LABELS, extra_callbacks=[CrashAt(3)])
    assert os.path.isdir(paths.backup)
    before = _contents(paths.root)
    texts = _texts()
    swapped = [1 - int("dog" in t) for t in texts]
    for labels in (LABELS[::-1], [*LABELS, "neutral"]):
        with pytest.raises(ValueError, match="differ from the interrupted run's") as error:
            train(config, train_data=_classified(swapped), labels=labels)
        message = str(error.value)
        assert paths.labels in message
        assert str(labels) in message and str(LABELS) in message
        assert _contents(paths.root) == before  # labels.txt, config.yaml and all as they were
    # Its own labels resume it.
    result = train(config, train_data=_classified(), labels=LABELS)
    assert int(result.model.optimizer.iterations) == 2 * 2
