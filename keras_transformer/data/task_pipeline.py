"""The input pipeline of the tagging, classification and language-modelling tasks.

From a task's raw examples (`data.task_sources`) to padded int32 batches `(x, y)` for
`model.fit`, in the graph (tf-text tokenization, vectorized over blocks of examples):

- tagging: `x` (B, T) the subword ids of the words, `y` (B, T) labels: a word's tag k as
  id k + 1 on its first piece, `NO_TAG_ID` (0) on its other pieces and on padding (so the
  masked loss and accuracy score each word once);
- classification: `x` (B, T) BOS then the text's ids (BOS is the first-token pooler's
  summary token), `y` (B,) the label;
- language modelling: `x` (B, T) `[BOS] + tokens`, `y` (B, T) `tokens + [EOS]`; a
  document longer than `max_length` is cut into consecutive windows of `max_length`
  positions (a window after the first starts with the token before it, not BOS).

Sequences longer than `max_length` are truncated (tagging, classification) or cut into
windows (language modelling). The encodings are `data.encoding`'s, the predictors' too; the
batching is `data.batching.bucket_batches` (length buckets of `batch_size` examples or
`tokens_per_batch` tokens, padded with 0, to the bucket's length with `pad_to_bucket`).

Public API: `encode_task_examples`, `make_task_batches`.

Example:
>>> from keras_transformer.tokenization import train_sentencepiece
>>> from keras_transformer.data.task_sources import load_tagging_data
>>> data = load_tagging_data("synthetic_pos", "train[:300]")
>>> tokenizer = train_sentencepiece(
...     (" ".join(w.decode() for w in words.numpy()) for words, _ in data.dataset),
...     vocab_size=300, seed=0)
>>> batches = make_task_batches("tagging", data.dataset, tokenizer, batch_size=4,
...                             max_length=16, shuffle=False)
>>> x, y = (t.numpy() for t in next(iter(batches)))
>>> x.shape[0], bool((y[x == 0] == 0).all())  # no label on padding
(4, True)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.constants import TASKS
from keras_transformer.data.batching import bucket_batches, default_bucket_lengths
from keras_transformer.data.encoding import (
    TOKENIZE_BLOCK,
    classification_ids,
    language_model_windows,
    tagging_labels,
)
from keras_transformer.validation import check_one_of, check_positive_int


def encode_task_examples(
    task: str, dataset: tf.data.Dataset, tokenizer: Any, max_length: int
) -> tf.data.Dataset:
    """A task's raw examples as `(x, y)` 1-D int32 examples (`y` a scalar when classifying).

    Examples with no id (an empty text) are dropped.
    """
    check_one_of("task", task, TASKS[1:])
    check_positive_int("max_length", max_length)
    if task == "language_modeling" and max_length < 2:
        raise ValueError(
            "Received an invalid value for argument `max_length`, expected at least 2 for "
            f"language modelling (BOS and a token). Received: max_length={max_length}"
        )

    def encode(*batch):
        if task == "tagging":
            words, tags = batch
            return tagging_labels(tokenizer, words, tags, max_length)
        if task == "classification":
            texts, labels = batch
            return classification_ids(tokenizer, texts, max_length), labels
        return language_model_windows(tokenizer, batch[0], max_length)

    blocks = (
        dataset.ragged_batch(TOKENIZE_BLOCK) if task == "tagging" else dataset.batch(TOKENIZE_BLOCK)
    )
    # Unbatched rows of ragged tensors are 1-D ragged values; a map makes them dense.
    examples = (
        blocks.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda x, y: (x, y), num_parallel_calls=tf.data.AUTOTUNE)
    )
    if task == "classification":
        return examples.filter(lambda x, y: tf.size(x) > 1)  # more than BOS
    return examples.filter(lambda x, y: tf.size(x) > 0)


def make_task_batches(
    task: str,
    dataset: tf.data.Dataset,
    tokenizer: Any,
    *,
    batch_size: int | None = None,
    tokens_per_batch: int | None = None,
    max_length: int = 128,
    bucket_step: int = 8,
    pad_to_bucket: bool = False,
    shuffle: bool = True,
    shuffle_buffer_size: int = 20_000,
    seed: int | None = None,
    cache: bool = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """A task's raw examples as length-bucketed, padded `(x, y)` batches for `model.fit`.

    Args:
        task: `"tagging"`, `"classification"` or `"language_modeling"`.
        dataset: the task's raw examples (`data.task_sources`).
        tokenizer: the `SubwordTokenizer`.
        batch_size: examples per batch (`data.batching.DEFAULT_BATCH_SIZE` when neither it
            nor `tokens_per_batch` is given).
        tokens_per_batch: batch by token count instead: a bucket of length `L` makes batches
            of `max(1, tokens_per_batch // L)` examples.
        max_length: the most ids per example (truncated, or windows for a language model).
        bucket_step: the spacing of the length buckets.
        pad_to_bucket: pad each batch to its bucket's length (fixed shapes for XLA).
        shuffle: shuffle the examples (each epoch anew).
        shuffle_buffer_size: the shuffle buffer, in examples.
        seed: the shuffle seed.
        cache: cache the encoded examples in memory.
        drop_remainder: drop each bucket's last, smaller batch.

    Returns:
        A `tf.data.Dataset` of `(x (B, T), y)` int32, `y` (B, T) or (B,), padded with 0.
    """
    examples = encode_task_examples(task, dataset, tokenizer, max_length)
    return bucket_batches(
        examples,
        batch_size=batch_size,
        tokens_per_batch=tokens_per_batch,
        bucket_lengths=default_bucket_lengths(max_length, bucket_step),
        max_length=max_length,
        pad_to_bucket=pad_to_bucket,
        shuffle=shuffle,
        shuffle_buffer_size=shuffle_buffer_size,
        seed=seed,
        cache=cache,
        drop_remainder=drop_remainder,
    )
