"""`train` on one's own labelled data: the examples' structure, the label names and the
label ids are checked, and an interrupted run resumes only on its own labels."""

import pytest
import tensorflow as tf
from task_configs import RECIPES, TINY_TRAINING, task_of

from keras_transformer.config import load_config
from keras_transformer.data import synthetic
from keras_transformer.data.task_sources import TaskData
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
