"""Length-bucketed batching of encoded examples, for every task.

`bucket_batches` takes a `tf.data.Dataset` of `(x, y)` examples of any nested structure of
int32 tensors, each a 1-D sequence or a scalar (a class label): an example's length is its
longest sequence; examples are cached, shuffled, grouped into length buckets
(`tf.data.Dataset.bucket_by_sequence_length`) of a fixed number of examples (`batch_size`)
or of tokens (`tokens_per_batch`), every sequence padded with 0, and prefetched. With
`pad_to_bucket=True` every sequence of a batch is padded to its bucket's length, so batch
shapes come from a small fixed set (good for XLA).

Public API: `bucket_batches`, `default_bucket_lengths`, `count_batches`, `without_autotuning`.

Example:

>>> examples = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1] * n for n in
...     range(1, 21)], tf.int32)).map(lambda x: (x, tf.size(x)))
>>> batches = bucket_batches(examples, tokens_per_batch=32, bucket_lengths=[8, 16, 20],
...                          pad_to_bucket=True, shuffle=False)
>>> sorted({tuple(x.shape) for x, y in batches})
[(1, 20), (2, 16), (4, 8)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.validation import check_lengths, check_positive_int

# Examples per batch when neither `batch_size` nor `tokens_per_batch` is given.
DEFAULT_BATCH_SIZE = 64


def default_bucket_lengths(max_length: int, step: int = 8) -> list[int]:
    """The bucket lengths `step, 2 * step, ...` up to `max_length` (included).

    Args:
        max_length: the longest sequence.
        step: the spacing between bucket lengths.

    Returns:
        Increasing lengths whose last one is `max_length`.

    Example:

    >>> default_bucket_lengths(20)
    [8, 16, 20]
    """
    check_positive_int("max_length", max_length)
    check_positive_int("step", step)
    return list(range(step, max_length, step)) + [max_length]


def bucket_batches(
    examples: tf.data.Dataset,
    *,
    batch_size: int | None = None,
    tokens_per_batch: int | None = None,
    bucket_lengths: Sequence[int],
    max_length: int | None = None,
    pad_to_bucket: bool = False,
    shuffle: bool = True,
    shuffle_buffer_size: int = 20_000,
    batch_shuffle_buffer_size: int | None = None,
    seed: int | None = None,
    cache: bool | str = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Groups examples into length buckets and pads them into batches.

    Args:
        examples: `(x, y)` examples, any nested structure of int tensors that are 1-D
            sequences or scalars; at least one 1-D.
        batch_size: examples per batch (`DEFAULT_BATCH_SIZE` when neither it nor
            `tokens_per_batch` is given).
        tokens_per_batch: batch by token count instead: a bucket of length `L` makes batches
            of `max(1, tokens_per_batch // L)` examples, so `B * T <= tokens_per_batch`
            whenever an example fits it.
        bucket_lengths: increasing bucket lengths (the longest example a bucket takes).
            Longer examples share one more bucket.
        max_length: the longest example, when known: with `tokens_per_batch` the batch
            size of the bucket past `bucket_lengths[-1]` (else 1 example a batch there);
            with `pad_to_bucket` checked against `bucket_lengths[-1]`.
        pad_to_bucket: pad each batch to its bucket's length instead of its longest
            example. Needs every example to fit the last bucket (`bucket_lengths[-1] >=
            max_length`; a longer example fails the iteration).
        shuffle: shuffle the examples (each epoch anew).
        shuffle_buffer_size: the shuffle buffer, in examples.
        batch_shuffle_buffer_size: with `shuffle`, also shuffle the batches in a buffer of
            this many batches (None: batches leave in the order their buckets fill). A
            bucket emits a batch when it is full, and at the end of each pass every bucket's
            last, smaller batch follows, shortest bucket first: with many buckets (a small
            bucket step) a pass ends with a run of small batches of ever longer examples,
            which a buffer at least that long spreads over the pass.
        seed: the shuffle seed.
        cache: `True` caches the examples in memory, a string caches them in that file,
            `False` does not cache.
        drop_remainder: drop each bucket's last, smaller batch.

    Returns:
        A `tf.data.Dataset` of batches of the examples' structure, sequences (B, T) padded
        with 0 and scalars (B,).
    """
    if batch_size is not None and tokens_per_batch is not None:
        raise ValueError(
            "Expected at most one of `batch_size` and `tokens_per_batch`. Received: "
            f"batch_size={batch_size!r}, tokens_per_batch={tokens_per_batch!r}"
        )
    if batch_size is None and tokens_per_batch is None:
        batch_size = DEFAULT_BATCH_SIZE
    if batch_size is not None:
        check_positive_int("batch_size", batch_size)
    else:
        check_positive_int("tokens_per_batch", tokens_per_batch)
    check_positive_int("shuffle_buffer_size", shuffle_buffer_size)
    if batch_shuffle_buffer_size is not None:
        check_positive_int("batch_shuffle_buffer_size", batch_shuffle_buffer_size)
    bucket_lengths = list(check_lengths("bucket_lengths", list(bucket_lengths), increasing=True))
    if max_length is not None:
        check_positive_int("max_length", max_length)
        if pad_to_bucket and bucket_lengths[-1] < max_length:
            raise ValueError(
                "Received an invalid value for argument `bucket_lengths`, expected its last "
                f"length >= max_length={max_length} with pad_to_bucket=True. Received: "
                f"bucket_lengths={bucket_lengths}"
            )
    sequences = _sequence_leaves(examples.element_spec)
    # A bucket of length L takes lengths in [previous L + 1, L]; one more bucket takes the
    # rest (it stays empty when the last length covers every example).
    boundaries = [length + 1 for length in bucket_lengths]
    if batch_size is not None:
        batch_sizes = [batch_size] * (len(boundaries) + 1)
    else:
        last = max(1, tokens_per_batch // max_length) if max_length else 1
        batch_sizes = [max(1, tokens_per_batch // n) for n in bucket_lengths] + [last]

    def element_length(*example: Any) -> tf.Tensor:
        leaves = tf.nest.flatten(example)
        return tf.reduce_max(tf.stack([tf.shape(leaves[i])[0] for i in sequences]))

    padding = tf.nest.map_structure(lambda spec: tf.constant(0, spec.dtype), examples.element_spec)
    if cache:
        examples = examples.cache(cache if isinstance(cache, str) else "")
    if shuffle:
        examples = examples.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    batches = examples.bucket_by_sequence_length(
        element_length_func=element_length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padding_values=padding,
        pad_to_bucket_boundary=pad_to_bucket,
        drop_remainder=drop_remainder,
    )
    if shuffle and batch_shuffle_buffer_size:
        batches = batches.shuffle(
            batch_shuffle_buffer_size,
            seed=None if seed is None else seed + 1,
            reshuffle_each_iteration=True,
        )
    return batches.prefetch(tf.data.AUTOTUNE)


def count_batches(dataset: tf.data.Dataset) -> int:
    """The number of batches of one pass over a finite dataset (iterates it once).

    For `bucket_batches` output this is the same every epoch: each length bucket makes
    `ceil(examples / batch size)` batches whatever the shuffle order. The pass also fills
    the pipeline's cache.
    """
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def _sequence_leaves(spec: Any) -> list[int]:
    """The indices, in `tf.nest.flatten` order, of the 1-D int leaves of an element spec."""
    leaves = tf.nest.flatten(spec)
    ok = bool(leaves) and all(
        isinstance(s, tf.TensorSpec) and s.dtype.is_integer and s.shape.rank in (0, 1)
        for s in leaves
    )
    sequences = [i for i, s in enumerate(leaves) if ok and s.shape.rank == 1]
    if not sequences:
        raise ValueError(
            "Received an invalid value for argument `examples`, expected a tf.data.Dataset "
            "of int tensors, 1-D sequences (at least one) or scalars. Received: "
            f"element_spec={spec}"
        )
    return sequences


def without_autotuning(batches: tf.data.Dataset) -> tf.data.Dataset:
    """`batches` without tf.data's autotuning (`tf.data.Options().autotune.enabled`): its
    iterators start no optimisation thread, so destroying one does not wait for that thread
    (up to a minute between its rounds). For data that Keras iterates anew every time
    (validation); `AUTOTUNE` parallelism and prefetching then take tf.data's defaults."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return batches.with_options(options)
