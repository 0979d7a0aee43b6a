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
windows (language modelling); examples are cached, shuffled, grouped into length buckets
and padded with 0.

Public API: `tagging_ids`, `classification_ids`, `language_model_windows` (the encodings,
shared with the inference wrappers), `encode_task_examples`, `make_task_batches`.

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

from keras_transformer.constants import BOS_ID, EOS_ID, NO_TAG_ID, TASKS
from keras_transformer.data.pipeline import default_bucket_lengths
from keras_transformer.tokenization import append_eos
from keras_transformer.validation import check_one_of, check_positive_int

_TOKENIZE_BLOCK = 1024


def tagging_ids(tokenizer: Any, words: tf.RaggedTensor, max_length: int | None = None):
    """The subword ids of sentences given as words, and where each word starts.

    Args:
        tokenizer: a `SubwordTokenizer`.
        words: `tf.string` (N, W) ragged, the words of each sentence.
        max_length: the most ids per sentence (later ones are cut); None: no limit.

    Returns:
        `(ids, starts, pieces_per_word)`: int32 (N, T) ragged ids; bool (N, T) ragged,
        True at each word's first piece; int64 (N, W) ragged number of pieces per word
        (before the cut; 0 for a word that tokenizes to nothing).
    """
    per_word = tf.cast(tokenizer.tokenize(words.flat_values), tf.int32)  # (words, P)
    counts = per_word.row_lengths()  # (words,)
    starts = tf.equal(tf.ragged.range(counts).flat_values, 0)  # (pieces,)
    ids = words.with_flat_values(per_word).merge_dims(1, 2)  # (N, T)
    starts = ids.with_flat_values(starts)
    if max_length is not None:
        ids, starts = ids[:, :max_length], starts[:, :max_length]
    return ids, starts, words.with_flat_values(counts)


def _tagging_labels(words: tf.RaggedTensor, tags: tf.RaggedTensor, tokenizer, max_length):
    ids, starts, counts = tagging_ids(tokenizer, words)
    tag_of_piece = tf.repeat(tf.cast(tags.flat_values, tf.int32) + 1, counts.flat_values)
    labels = ids.with_flat_values(tf.where(starts.flat_values, tag_of_piece, NO_TAG_ID))
    return ids[:, :max_length], labels[:, :max_length]  # (N, T), (N, T)


def classification_ids(tokenizer: Any, texts: Any, max_length: int) -> tf.RaggedTensor:
    """`[BOS] + ids` of each text (N,), cut to `max_length` ids: int32 (N, None) ragged."""
    tokens = tf.cast(tokenizer.tokenize(texts), tf.int32)[:, : max_length - 1]
    bos = tf.fill(tf.stack([tokens.nrows(), 1]), BOS_ID)
    return tf.concat([tf.RaggedTensor.from_tensor(bos), tokens], axis=1)


def language_model_windows(tokenizer: Any, texts: Any, max_length: int):
    """Inputs `[BOS] + ids` and labels `ids + [EOS]` of documents, cut into windows.

    Args:
        tokenizer: a `SubwordTokenizer`.
        texts: `tf.string` (N,) documents.
        max_length: positions per window.

    Returns:
        `(inputs, labels)`: int32 (windows, None) ragged, at most `max_length` each; the
        windows of a document follow each other.
    """
    tokens = tf.cast(tokenizer.tokenize(texts), tf.int32)  # (N, L)
    bos = tf.RaggedTensor.from_tensor(tf.fill(tf.stack([tokens.nrows(), 1]), BOS_ID))
    inputs = tf.concat([bos, tokens], axis=1)  # (N, L + 1)
    labels = append_eos(tokens, EOS_ID)  # (N, L + 1)
    lengths = inputs.row_lengths()  # (N,)
    windows = (lengths + max_length - 1) // max_length  # (N,)
    starts = tf.ragged.range(windows) * max_length  # (N, windows)
    window_lengths = tf.minimum(
        tf.cast(max_length, tf.int64), tf.repeat(lengths, windows) - starts.flat_values
    )  # (all windows,)
    return (
        tf.RaggedTensor.from_row_lengths(inputs.flat_values, window_lengths),
        tf.RaggedTensor.from_row_lengths(labels.flat_values, window_lengths),
    )


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
            return _tagging_labels(words, tags, tokenizer, max_length)
        if task == "classification":
            texts, labels = batch
            return classification_ids(tokenizer, texts, max_length), labels
        return language_model_windows(tokenizer, batch[0], max_length)

    blocks = (
        dataset.ragged_batch(_TOKENIZE_BLOCK)
        if task == "tagging"
        else dataset.batch(_TOKENIZE_BLOCK)
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
    batch_size: int = 64,
    max_length: int = 128,
    bucket_step: int = 8,
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
        batch_size: examples per batch.
        max_length: the most ids per example (truncated, or windows for a language model).
        bucket_step: the spacing of the length buckets.
        shuffle: shuffle the examples (each epoch anew).
        shuffle_buffer_size: the shuffle buffer, in examples.
        seed: the shuffle seed.
        cache: cache the encoded examples in memory.
        drop_remainder: drop each bucket's last, smaller batch.

    Returns:
        A `tf.data.Dataset` of `(x (B, T), y)` int32, `y` (B, T) or (B,), padded with 0.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("shuffle_buffer_size", shuffle_buffer_size)
    examples = encode_task_examples(task, dataset, tokenizer, max_length)
    if cache:
        examples = examples.cache()
    if shuffle:
        examples = examples.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    boundaries = [n + 1 for n in default_bucket_lengths(max_length, bucket_step)]
    batches = examples.bucket_by_sequence_length(
        element_length_func=lambda x, y: tf.shape(x)[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        padding_values=(0, 0),
        drop_remainder=drop_remainder,
    )
    return batches.prefetch(tf.data.AUTOTUNE)
