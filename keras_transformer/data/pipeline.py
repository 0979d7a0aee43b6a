"""The `tf.data` input pipeline: from string pairs to padded id batches for `model.fit`.

Each `(source_text, target_text)` pair becomes

- `source_ids`: the source subword ids followed by EOS (`source_eos=True`, the default: it
  tells the decoder where the source ends, as in fairseq and the TF official models), or
  the bare ids (`source_eos=False`, how models of version 0.1 were trained);
- `target_in = [BOS] + target_ids` (the decoder input, teacher forcing);
- `target_out = target_ids + [EOS]` (the labels),

and batches have the structure `((source_ids, target_in), target_out)`, int32, dense, padded
with `pad_id` 0: `(B, S)`, `(B, T)`, `(B, T)`. Everything runs in the graph (tensorflow-text
ops, no `py_function`): tokenization is vectorized over blocks of examples; pairs longer
than `max_source_length` (`len(source_ids)`, EOS included) or `max_target_length`
(`len(target_in)`) are dropped or truncated, pairs with an empty side are dropped. The
encodings are `data.encoding`'s, the `Translator`'s too; the batching is
`data.batching.bucket_batches` (length buckets of `batch_size` sentences or
`tokens_per_batch` tokens; with `pad_to_bucket=True` source and target are padded to their
bucket's length).

Public API:

- `make_batches(dataset, source_tokenizer, target_tokenizer=None, *, batch_size=None,
  tokens_per_batch=None, max_source_length=128, max_target_length=128,
  length_policy="drop", source_eos=True, bucket_lengths=None, pad_to_bucket=False,
  shuffle=True, shuffle_buffer_size=20000, seed=None, cache=True, drop_remainder=False)`.
- `encode_pairs(dataset, source_tokenizer, target_tokenizer=None, *, max_source_length=128,
  max_target_length=128, length_policy="drop", source_eos=True)`: the per-example stage
  alone, yielding `((source_ids, target_in), target_out)` 1-D int32 tensors.

Example:

```python
pairs = load_parallel_dataset("multi30k", split="train")
tokenizer = SubwordTokenizer.load("runs/de-en/tokenizer")
train = make_batches(pairs, tokenizer, batch_size=128, max_source_length=100)
model.fit(train, epochs=10)
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.constants import LENGTH_POLICIES
from keras_transformer.data.batching import bucket_batches, default_bucket_lengths
from keras_transformer.data.encoding import (
    TOKENIZE_BLOCK,
    source_limit,
    token_ids,
    translation_source,
    translation_targets,
)
from keras_transformer.data.examples import TEXT_PAIRS, check_examples
from keras_transformer.validation import check_one_of, check_positive_int


def encode_pairs(
    dataset: tf.data.Dataset,
    source_tokenizer: Any,
    target_tokenizer: Any | None = None,
    *,
    max_source_length: int = 128,
    max_target_length: int = 128,
    length_policy: str = "drop",
    source_eos: bool = True,
) -> tf.data.Dataset:
    """Tokenizes string pairs into `((source_ids, target_in), target_out)` examples.

    Args:
        dataset: `(source_text, target_text)` scalar `tf.string` pairs.
        source_tokenizer: a `keras_transformer.tokenization.SubwordTokenizer` (anything with
            `tokenize(strings) -> RaggedTensor`, `bos_id`, `eos_id` and `pad_id == 0`).
        target_tokenizer: the target tokenizer; the source one (shared vocabulary) if None.
        max_source_length: the most source ids (EOS included).
        max_target_length: the most ids of `target_in` (and `target_out`): target ids + 1.
        length_policy: `"drop"` the pairs over a limit, or `"truncate"` them (the truncated
            `target_out` and source still end with EOS).
        source_eos: append the source tokenizer's EOS id to every source.

    Returns:
        A `tf.data.Dataset` of `((source_ids, target_in), target_out)`, 1-D int32 tensors.

    Example (not run as a doctest: it needs a corpus and a trained tokenizer):

    ```python
    examples = encode_pairs(pairs, tokenizer, max_source_length=64)
    ```
    """
    target_tokenizer = source_tokenizer if target_tokenizer is None else target_tokenizer
    check_examples(dataset, TEXT_PAIRS, "dataset")
    for arg, tokenizer in (
        ("source_tokenizer", source_tokenizer),
        ("target_tokenizer", target_tokenizer),
    ):
        _check_tokenizer(arg, tokenizer)
    check_positive_int("max_source_length", max_source_length)
    check_positive_int("max_target_length", max_target_length)
    source_eos = bool(source_eos)
    if source_eos and max_source_length < 2:
        raise ValueError(
            "Received an invalid value for argument `max_source_length`, expected an integer "
            ">= 2 with source_eos=True (EOS plus one id). Received: "
            f"max_source_length={max_source_length}"
        )
    if max_target_length < 2:
        raise ValueError(
            "Received an invalid value for argument `max_target_length`, expected an integer "
            ">= 2 (BOS or EOS plus one id). Received: "
            f"max_target_length={max_target_length}"
        )
    check_one_of("length_policy", length_policy, LENGTH_POLICIES)
    bos_id, eos_id = int(target_tokenizer.bos_id), int(target_tokenizer.eos_id)
    source_eos_id = int(source_tokenizer.eos_id)
    source_tokens_limit = source_limit(max_source_length, source_eos)

    def encode(source_text: tf.Tensor, target_text: tf.Tensor):
        source = token_ids(source_tokenizer, source_text)
        target = token_ids(target_tokenizer, target_text)
        source_lengths = source.row_lengths()
        target_lengths = target.row_lengths()
        keep = tf.logical_and(source_lengths > 0, target_lengths > 0)
        if length_policy == "drop":
            keep = tf.logical_and(
                keep,
                tf.logical_and(
                    source_lengths <= source_tokens_limit,
                    target_lengths <= max_target_length - 1,
                ),
            )
        source = translation_source(
            tf.ragged.boolean_mask(source, keep),
            max_source_length,
            source_eos=source_eos,
            eos_id=source_eos_id,
        )
        target_in, target_out = translation_targets(
            tf.ragged.boolean_mask(target, keep), max_target_length, bos_id=bos_id, eos_id=eos_id
        )
        return source, target_in, target_out

    encoded = (
        dataset.batch(TOKENIZE_BLOCK).map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    )
    return encoded.map(
        lambda source, target_in, target_out: ((source, target_in), target_out),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def make_batches(
    dataset: tf.data.Dataset,
    source_tokenizer: Any,
    target_tokenizer: Any | None = None,
    *,
    batch_size: int | None = None,
    tokens_per_batch: int | None = None,
    max_source_length: int = 128,
    max_target_length: int = 128,
    length_policy: str = "drop",
    source_eos: bool = True,
    bucket_lengths: Sequence[int] | None = None,
    pad_to_bucket: bool = False,
    shuffle: bool = True,
    shuffle_buffer_size: int = 20_000,
    seed: int | None = None,
    cache: bool | str = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Turns string pairs into length-bucketed, padded batches ready for `model.fit`.

    Args:
        dataset: `(source_text, target_text)` scalar `tf.string` pairs (e.g. from
            `load_parallel_dataset`).
        source_tokenizer: the source `SubwordTokenizer`.
        target_tokenizer: the target `SubwordTokenizer`; the source one if None (shared).
        batch_size: sentences per batch (`data.batching.DEFAULT_BATCH_SIZE` when neither it
            nor `tokens_per_batch` is given).
        tokens_per_batch: batch by token count instead: a bucket of length `L` makes batches
            of `max(1, tokens_per_batch // L)` sentences.
        max_source_length: the most source ids (EOS included).
        max_target_length: the most ids of `target_in`/`target_out`.
        length_policy: `"drop"` or `"truncate"` the pairs over a limit.
        source_eos: append EOS to every source (see `encode_pairs`).
        bucket_lengths: increasing bucket lengths (the longest sequence a bucket takes);
            `default_bucket_lengths(max(max_source_length, max_target_length))` if None.
        pad_to_bucket: pad each batch to its bucket's length (fixed shapes for XLA) instead
            of the longest sequence of the batch. Needs `bucket_lengths[-1]` >= both limits.
        shuffle: shuffle the examples (each epoch anew).
        shuffle_buffer_size: the shuffle buffer, in examples.
        seed: the shuffle seed.
        cache: `True` caches the tokenized examples in memory, a string caches them in that
            file, `False` does not cache.
        drop_remainder: drop each bucket's last, smaller batch.

    Returns:
        A `tf.data.Dataset` of `((source_ids, target_in), target_out)`, int32 tensors of
        shapes `(B, S)`, `(B, T)`, `(B, T)` padded with 0.

    Example (not run as a doctest: it needs a corpus and a trained tokenizer):

    ```python
    train = make_batches(pairs, tokenizer, tokens_per_batch=4096,
                         pad_to_bucket=True)
    (source_ids, target_in), target_out = next(iter(train))
    ```
    """
    examples = encode_pairs(
        dataset,
        source_tokenizer,
        target_tokenizer,
        max_source_length=max_source_length,
        max_target_length=max_target_length,
        length_policy=length_policy,
        source_eos=source_eos,
    )
    max_length = max(max_source_length, max_target_length)
    return bucket_batches(
        examples,
        batch_size=batch_size,
        tokens_per_batch=tokens_per_batch,
        bucket_lengths=default_bucket_lengths(max_length)
        if bucket_lengths is None
        else bucket_lengths,
        max_length=max_length,
        pad_to_bucket=pad_to_bucket,
        shuffle=shuffle,
        shuffle_buffer_size=shuffle_buffer_size,
        seed=seed,
        cache=cache,
        drop_remainder=drop_remainder,
    )


def _check_tokenizer(name: str, tokenizer: Any) -> None:
    if not all(hasattr(tokenizer, a) for a in ("tokenize", "bos_id", "eos_id", "pad_id")):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a SubwordTokenizer. "
            f"Received: {type(tokenizer).__name__}"
        )
    if tokenizer.pad_id != 0:
        raise ValueError(
            f"Received a `{name}` whose pad_id is not 0; the batches are padded with 0. "
            f"Received: pad_id={tokenizer.pad_id}"
        )
