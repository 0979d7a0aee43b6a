"""The per-example encodings of every task, shared by training and inference.

The tasks' training batches (`keras_transformer.tasks`: `Task.encode`, translation through
`data.pipeline.encode_pairs`) and the predictors (`keras_transformer.predictors`) call these
same functions, so a model sees at inference exactly the ids it was trained on;
`encode_in_blocks` runs one over a dataset a block of examples at a time. All run in the
TensorFlow graph (tf-text tokenization), vectorized over a batch of texts, and return int32
ragged tensors:

- translation: `translation_source` / `translation_source_ids` (the source ids, cut to the
  length limit, EOS last with `source_eos`), `translation_targets` (`[BOS] + ids` and
  `ids + [EOS]`, teacher forcing);
- tagging: `text_words` (a text's words), `tagging_ids` (the words' subword ids and where
  each word starts), `tagging_labels` (a word's tag k as id k + 1 on its first piece);
- classification: `classification_ids` (`[BOS] + ids`; BOS is the first-token pooler's
  summary token);
- language modelling: `language_model_windows` (`[BOS] + ids` and `ids + [EOS]`, cut into
  windows), `prompt_ids` (a prompt's last ids, room left for BOS).

Example:

>>> from keras_transformer.tokenization import train_sentencepiece
>>> tokenizer = train_sentencepiece(["a dog runs", "two cats sleep"] * 50, vocab_size=30,
...                                 byte_fallback=False, hard_vocab_limit=False, seed=0)
>>> ids = translation_source_ids(tokenizer, tf.constant(["a dog runs"]), 3, source_eos=True)
>>> ids.row_lengths().numpy().tolist(), int(ids[0, -1]) == tokenizer.eos_id
([3], True)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID, NO_TAG_ID
from keras_transformer.data.examples import assertion
from keras_transformer.tokenization import append_eos

# Examples tokenized at once by the input pipelines (tf-text vectorizes over a block).
TOKENIZE_BLOCK = 1024


def token_ids(tokenizer: Any, texts: Any) -> tf.RaggedTensor:
    """The subword ids of texts (N,): int32 (N, None) ragged, no BOS or EOS."""
    return tf.cast(tokenizer.tokenize(texts), tf.int32)


def _prepend_bos(ids: tf.RaggedTensor, bos_id: int = BOS_ID) -> tf.RaggedTensor:
    column = tf.fill(tf.stack([ids.nrows(), 1]), tf.cast(bos_id, ids.dtype))  # (N, 1)
    return tf.concat([tf.RaggedTensor.from_tensor(column), ids], axis=1)


# Translation.


def source_limit(max_length: int, source_eos: bool) -> int:
    """The most source tokens a source of `max_length` ids keeps (one less for its EOS)."""
    return int(max_length) - int(bool(source_eos))


def translation_source(
    tokens: tf.RaggedTensor, max_length: int, *, source_eos: bool, eos_id: int = EOS_ID
) -> tf.RaggedTensor:
    """Source ids from tokens (N, None): cut to `max_length` ids, EOS last with
    `source_eos` (EOS counted in `max_length`).

    Example:

    >>> translation_source(tf.ragged.constant([[5, 6, 7], []]), 3, source_eos=True).to_list()
    [[5, 6, 3], [3]]
    """
    cut = tokens[:, : source_limit(max_length, source_eos)]
    return append_eos(cut, eos_id) if source_eos else cut


def translation_source_ids(
    tokenizer: Any, texts: Any, max_length: int, *, source_eos: bool
) -> tf.RaggedTensor:
    """The source ids of texts (N,) as a translation model reads them: int32 (N, None).

    Args:
        tokenizer: the source `SubwordTokenizer`.
        texts: `tf.string` (N,).
        max_length: the most ids per source (EOS included).
        source_eos: end every source with the tokenizer's EOS id.

    Returns:
        int32 (N, None) ragged ids.
    """
    return translation_source(
        token_ids(tokenizer, texts),
        max_length,
        source_eos=source_eos,
        eos_id=int(tokenizer.eos_id),
    )


def translation_targets(
    tokens: tf.RaggedTensor, max_length: int, *, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """`(target_in, target_out)` = `([BOS] + ids, ids + [EOS])` from target tokens (N, None),
    each cut to `max_length` ids.

    Example:

    >>> target_in, target_out = translation_targets(tf.ragged.constant([[5, 6, 7]]), 3)
    >>> target_in.to_list(), target_out.to_list()
    ([[2, 5, 6]], [[5, 6, 3]])
    """
    cut = tokens[:, : int(max_length) - 1]
    return _prepend_bos(cut, bos_id), append_eos(cut, eos_id)


# Tagging.


def text_words(texts: Any) -> tf.RaggedTensor:
    """The words of texts (N,) as tagging reads them: whitespace-separated, `tf.string`
    (N, None) ragged (the tagging data's words are joined with spaces)."""
    return tf.strings.split(texts)


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
    per_word = token_ids(tokenizer, words.flat_values)  # (words, P)
    counts = per_word.row_lengths()  # (words,)
    starts = tf.equal(tf.ragged.range(counts).flat_values, 0)  # (pieces,)
    ids = words.with_flat_values(per_word).merge_dims(1, 2)  # (N, T)
    starts = ids.with_flat_values(starts)
    if max_length is not None:
        ids, starts = ids[:, :max_length], starts[:, :max_length]
    return ids, starts, words.with_flat_values(counts)


def tagging_labels(
    tokenizer: Any,
    words: tf.RaggedTensor,
    tags: tf.RaggedTensor,
    max_length: int,
    *,
    origin: str = "the data",
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """The ids of tagged sentences and their labels, cut to `max_length`.

    A word's tag k is label k + 1 on its first piece; its other pieces get `NO_TAG_ID`.

    Args:
        tokenizer: a `SubwordTokenizer`.
        words: `tf.string` (N, W) ragged.
        tags: int (N, W) ragged, each word's tag id.
        max_length: the most ids per sentence.
        origin: the data's name in the error for a sentence of more or fewer tags than words.

    Returns:
        `(ids, labels)`: int32 (N, T) ragged each.

    Raises:
        tf.errors.InvalidArgumentError: when it runs, for a sentence of another number of
            tags than words (else the block's tags would shift across its sentences).
    """
    word_counts, tag_counts = words.row_lengths(), tags.row_lengths()
    differ = tf.not_equal(word_counts, tag_counts)

    def first_of_them() -> list[Any]:  # the first sentence that differs
        first = tf.ragged.boolean_mask(words, differ)[:1]
        return [
            f"Received an example of {origin} whose tags and words differ in number: expected a "
            "tag per word. An example has",
            first.row_lengths(),
            "words but",
            tf.boolean_mask(tag_counts, differ)[:1],
            "tags:",
            tf.strings.reduce_join(first, axis=-1, separator=" "),
        ]

    check = assertion(tf.logical_not(tf.reduce_any(differ)), first_of_them)
    with tf.control_dependencies([check]):
        tags = tags.with_flat_values(tf.identity(tags.flat_values))
    ids, starts, counts = tagging_ids(tokenizer, words)
    tag_of_piece = tf.repeat(tf.cast(tags.flat_values, tf.int32) + 1, counts.flat_values)
    labels = ids.with_flat_values(tf.where(starts.flat_values, tag_of_piece, NO_TAG_ID))
    return ids[:, :max_length], labels[:, :max_length]


# Classification.


def classification_ids(tokenizer: Any, texts: Any, max_length: int) -> tf.RaggedTensor:
    """`[BOS] + ids` of each text (N,), cut to `max_length` ids: int32 (N, None) ragged."""
    return _prepend_bos(token_ids(tokenizer, texts)[:, : max_length - 1])


# Language modelling.


def language_model_windows(tokenizer: Any, texts: Any, max_length: int):
    """Inputs `[BOS] + ids` and labels `ids + [EOS]` of documents, cut into windows.

    A window after a document's first starts with the token before it, not BOS.

    Args:
        tokenizer: a `SubwordTokenizer`.
        texts: `tf.string` (N,) documents.
        max_length: positions per window.

    Returns:
        `(inputs, labels)`: int32 (windows, None) ragged, at most `max_length` each; the
        windows of a document follow each other.
    """
    tokens = token_ids(tokenizer, texts)  # (N, L)
    inputs = _prepend_bos(tokens)  # (N, L + 1)
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


# What a blank text is, in Python and in an export's graph alike: nothing but whitespace
# (RE2's `\s`) and Unicode separators (`\p{Z}`: no-break and ideographic spaces, ...).
BLANK_PATTERN = r"[\s\p{Z}]*"


def blank_texts(texts: Any) -> tf.Tensor:
    """Whether each text is blank (empty or only whitespace): bool (N,).

    >>> blank_texts(tf.constant(["", " \t", "\u00a0", "a"])).numpy().tolist()
    [True, True, True, False]
    """
    return tf.strings.regex_full_match(tf.convert_to_tensor(texts, tf.string), BLANK_PATTERN)


def prompt_ids(tokenizer: Any, texts: Any, max_length: int) -> tf.RaggedTensor:
    """Each prompt's ids, its last `max_length - 1` (room for the BOS the decoder puts
    first, as a training window starts): int32 (N, None) ragged."""
    ids = token_ids(tokenizer, texts)
    keep = int(max_length) - 1
    return ids[:, -keep:] if keep > 0 else ids[:, :0]  # (N, None)


def encode_in_blocks(
    dataset: tf.data.Dataset, encode: Any, *, ragged: bool = False, min_length: int = 1
) -> tf.data.Dataset:
    """Raw examples encoded a block of `TOKENIZE_BLOCK` at a time (tf-text tokenization
    vectorized over the block) into `(x, y)` examples of 1-D int32 tensors (`y` may be a
    scalar label).

    Args:
        dataset: the raw examples.
        encode: the block's examples (the dataset's components, batched) -> `(x, y)`, each
            ragged (N, None) or dense (N,).
        ragged: the examples have sequences of different lengths (a sentence's words),
            batched as ragged tensors.
        min_length: drop the examples whose `x` has fewer ids (an empty text).

    Returns:
        A `tf.data.Dataset` of `(x, y)`.
    """
    # Unbatched rows of ragged tensors are 1-D ragged values; a map makes them dense.
    blocks = dataset.ragged_batch(TOKENIZE_BLOCK) if ragged else dataset.batch(TOKENIZE_BLOCK)
    examples = (
        blocks.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda x, y: (x, y), num_parallel_calls=tf.data.AUTOTUNE)
    )
    return examples.filter(lambda x, y: tf.size(x) >= min_length)
