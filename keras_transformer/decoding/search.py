"""The graph searches: greedy search and ancestral sampling, and the pieces every search
shares (length limits, the GNMT length penalty, special-token masking, the cache set-up).

Every search runs the whole generation as one `tf.while_loop` over fixed shapes: the
encoder runs once, the cross-attention keys/values are projected once
(`Transformer.init_decoding_cache`), and each step feeds one token per hypothesis through
`Transformer.decode_step`, which writes its keys/values into a self-attention cache of
fixed length `num_steps`. Token `t` of the output sits at decoder position `t + 1` (position
0 holds BOS). Beam search, built from the same pieces, is `keras_transformer.decoding.beam`.

The functions here are usable inside any `tf.function` (with or without XLA) and in an
exported SavedModel. They take padded source ids and return padded target ids (no BOS; EOS
kept; `pad_id` after EOS) and scores: sums of the model's log-probabilities of the emitted
tokens (EOS included) divided by the GNMT length penalty `((5 + length) / 6) ** alpha`.

Example:

```python
limits = max_decode_lengths(source_ids, model.pad_id, model.max_length)
tokens, scores = greedy_search(model, source_ids, limits)
```
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.constants import (
    BOS_ID,
    DEFAULT_MAX_LENGTH_A,
    DEFAULT_MAX_LENGTH_B,
    EOS_ID,
)
from keras_transformer.decoding.ngrams import ban_repeated_ngrams
from keras_transformer.validation import check_non_negative_int

NEG_INF = float("-inf")


def gnmt_length_penalty(length: Any, alpha: float) -> tf.Tensor:
    """The GNMT length penalty `((5 + length) / 6) ** alpha` as float32.

    Args:
        length: int or float tensor of lengths (emitted tokens, EOS included).
        alpha: the exponent; 0 disables the penalty.

    Returns:
        A float32 tensor with the shape of `length`.
    """
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def max_decode_lengths(
    source_ids: Any,
    pad_id: int = 0,
    max_length: int | Any = 256,
    max_length_a: float = DEFAULT_MAX_LENGTH_A,
    max_length_b: int = DEFAULT_MAX_LENGTH_B,
) -> tf.Tensor:
    """Per-sentence output length limits `min(max_length, a * source_length + b)`.

    Args:
        source_ids: int (B, S) padded source ids.
        pad_id: the padding id.
        max_length: the absolute limit (int or scalar tensor).
        max_length_a: the factor of the source length.
        max_length_b: the constant added.

    Returns:
        int32 (B,), at least 1.
    """
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.float32), 1)
    relative = tf.cast(tf.math.floor(max_length_a * source_lengths), tf.int32) + max_length_b
    return tf.maximum(tf.minimum(relative, tf.cast(max_length, tf.int32)), 1)  # (B,)


def _mask_special(
    log_probs: tf.Tensor, step, *, bos_id: int, pad_id: int, eos_id: int, min_length: int
) -> tf.Tensor:
    """Forbids PAD and BOS always, and EOS while fewer than `min_length` tokens exist."""
    vocab_size = tf.shape(log_probs)[-1]
    ids = tf.range(vocab_size)
    forbidden = tf.logical_or(tf.equal(ids, pad_id), tf.equal(ids, bos_id))  # (V,)
    if min_length > 0:
        forbidden = tf.logical_or(
            forbidden, tf.logical_and(tf.equal(ids, eos_id), step < min_length)
        )
    return tf.where(forbidden, tf.constant(NEG_INF, log_probs.dtype), log_probs)


def _initial_sequences(batch_size, num_steps, bos_id: int, pad_id: int) -> tf.Tensor:
    """(B, 1 + num_steps): BOS then PAD."""
    return tf.concat(
        [
            tf.fill([batch_size, 1], tf.constant(bos_id, tf.int32)),
            tf.fill([batch_size, num_steps], tf.constant(pad_id, tf.int32)),
        ],
        axis=1,
    )


def _set_column(sequences: tf.Tensor, index, values: tf.Tensor) -> tf.Tensor:
    """Writes `values` (..., ) into column `index` of `sequences` (..., L)."""
    length = tf.shape(sequences)[-1]
    one_hot = tf.equal(tf.range(length), index)  # (L,)
    return tf.where(one_hot, values[..., None], sequences)


def _get_column(sequences: tf.Tensor, index) -> tf.Tensor:
    """Column `index` of `sequences` (B, L) as (B, 1)."""
    return tf.gather(sequences, tf.reshape(index, [1]), axis=1)


def _process_sampling_logits(
    logits, temperature: float, top_k: int | None, top_p: float | None
) -> tf.Tensor:
    """Temperature, top-k and nucleus (top-p) filtering of (B, V) float32 logits."""
    if temperature != 1.0:
        logits = logits / temperature
    neg_inf = tf.constant(NEG_INF, logits.dtype)
    if top_k is not None:
        k = tf.minimum(top_k, tf.shape(logits)[-1])
        kth = tf.math.top_k(logits, k=k).values[:, -1:]  # (B, 1)
        logits = tf.where(logits < kth, neg_inf, logits)
    if top_p is not None:
        sorted_logits = tf.sort(logits, axis=-1, direction="DESCENDING")  # (B, V)
        probs = tf.nn.softmax(sorted_logits, axis=-1)
        before = tf.cumsum(probs, axis=-1, exclusive=True)  # mass of the better tokens
        keep = before < top_p  # the smallest prefix holding `top_p` of the mass
        threshold = tf.reduce_min(
            tf.where(keep, sorted_logits, tf.constant(float("inf"), logits.dtype)),
            axis=-1,
            keepdims=True,
        )  # (B, 1)
        logits = tf.where(logits < threshold, neg_inf, logits)
    return logits


def _prepare(model, source_ids, num_steps, repeat: int = 1):
    """Encodes, builds the caches, and repeats each row `repeat` times (beam search)."""
    source_ids = tf.cast(source_ids, tf.int32)
    encoder_output, source_mask = model.encode(source_ids, training=False)  # (B, S, D), (B, S)
    cache, cross_cache = model.init_decoding_cache(encoder_output, num_steps)
    if repeat > 1:
        source_mask = tf.repeat(source_mask, repeat, axis=0)  # (B*K, S)
        cache, cross_cache = tf.nest.map_structure(
            lambda c: tf.repeat(c, repeat, axis=0), (cache, cross_cache)
        )  # N x 2 x (B*K, H, T, Dh), N x 2 x (B*K, H, S, Dh)
    return source_mask, cache, cross_cache


def _resolve_lengths(source_ids, max_lengths, num_steps):
    batch_size = tf.shape(source_ids)[0]
    if num_steps is None:
        if max_lengths is None:
            raise ValueError("Pass `num_steps`, `max_lengths` or both.")
        num_steps = tf.reduce_max(max_lengths)
    num_steps = tf.cast(num_steps, tf.int32) if tf.is_tensor(num_steps) else int(num_steps)
    if max_lengths is None:
        max_lengths = tf.fill([batch_size], tf.cast(num_steps, tf.int32))
    max_lengths = tf.minimum(tf.cast(max_lengths, tf.int32), num_steps)  # (B,)
    return batch_size, max_lengths, num_steps


def _token_search(
    model,
    source_ids,
    max_lengths,
    num_steps,
    *,
    min_length: int,
    length_penalty: float,
    bos_id: int,
    eos_id: int,
    do_sample: bool,
    no_repeat_ngram_size: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed=None,
):
    """Greedy search or ancestral sampling: one hypothesis per sentence."""
    no_repeat_ngram_size = check_non_negative_int("no_repeat_ngram_size", no_repeat_ngram_size)
    pad_id = model.pad_id
    batch_size, max_lengths, num_steps = _resolve_lengths(source_ids, max_lengths, num_steps)
    source_mask, cache, cross_cache = _prepare(model, source_ids, num_steps)
    if do_sample:
        seed = tf.constant([0, 0], tf.int64) if seed is None else tf.cast(seed, tf.int64)

    def cond(step, sequences, cache, finished, log_prob_sums, lengths):
        return tf.logical_and(step < num_steps, tf.logical_not(tf.reduce_all(finished)))

    def body(step, sequences, cache, finished, log_prob_sums, lengths):
        inputs = _get_column(sequences, step)  # (B, 1)
        logits, cache = model.decode_step(inputs, source_mask, cache, cross_cache, step)
        logits = tf.cast(logits[:, 0, :], tf.float32)  # (B, V)
        log_probs = _mask_special(
            tf.nn.log_softmax(logits),
            step,
            bos_id=bos_id,
            pad_id=pad_id,
            eos_id=eos_id,
            min_length=min_length,
        )  # (B, V)
        log_probs = ban_repeated_ngrams(log_probs, sequences, step, no_repeat_ngram_size)
        if do_sample:
            filtered = _process_sampling_logits(
                tf.where(tf.math.is_inf(log_probs), log_probs, logits), temperature, top_k, top_p
            )
            # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits); XLA
            # compiles it (its StatelessMultinomial kernel takes no int64 seed).
            step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))
            uniform = tf.random.stateless_uniform(
                tf.shape(filtered), seed=step_seed, minval=1e-20, maxval=1.0
            )  # (B, V)
            next_ids = tf.argmax(
                filtered - tf.math.log(-tf.math.log(uniform)), axis=-1, output_type=tf.int32
            )  # (B,)
        else:
            next_ids = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # (B,)
        token_log_probs = tf.gather(log_probs, next_ids, batch_dims=1)  # (B,)
        next_ids = tf.where(finished, tf.constant(pad_id, tf.int32), next_ids)
        log_prob_sums += tf.where(finished, 0.0, token_log_probs)
        lengths += tf.cast(tf.logical_not(finished), tf.int32)
        finished = finished | tf.equal(next_ids, eos_id) | (step + 1 >= max_lengths)
        sequences = _set_column(sequences, step + 1, next_ids)  # (B, 1 + T)
        return step + 1, sequences, cache, finished, log_prob_sums, lengths

    initial = (
        tf.constant(0, tf.int32),
        _initial_sequences(batch_size, num_steps, bos_id, pad_id),  # (B, 1 + T)
        cache,  # N x 2 x (B, H, T, Dh)
        max_lengths <= 0,  # (B,)
        tf.zeros([batch_size], tf.float32),
        tf.zeros([batch_size], tf.int32),
    )
    _, sequences, _, _, log_prob_sums, lengths = tf.while_loop(
        cond, body, initial, maximum_iterations=num_steps
    )
    scores = log_prob_sums / gnmt_length_penalty(tf.maximum(lengths, 1), length_penalty)
    return sequences[:, 1:], scores


def greedy_search(
    model,
    source_ids: Any,
    max_lengths: Any = None,
    num_steps: int | Any = None,
    *,
    min_length: int = 0,
    no_repeat_ngram_size: int = 0,
    length_penalty: float = 0.0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Greedy decoding with the key/value cache, as one `tf.while_loop`.

    Traceable in `tf.function` (with `jit_compile=True` when the shapes are static).

    Args:
        model: a `Transformer` (anything with `pad_id`, `encode`, `init_decoding_cache` and
            `decode_step`).
        source_ids: int (B, S) source ids padded with `model.pad_id`.
        max_lengths: optional int (B,), each sentence's largest number of output tokens
            (`max_decode_lengths`); defaults to `num_steps`.
        num_steps: the output length T (the cache length), an int or scalar tensor; at
            most `model.max_length`. Defaults to `max(max_lengths)`.
        min_length: EOS is forbidden while fewer than `min_length` tokens were emitted.
        no_repeat_ngram_size: n > 0 forbids every token that would repeat an n-gram of
            the output (`keras_transformer.decoding.ngrams`); 0 (the default) does not.
        length_penalty: the GNMT alpha used for the returned scores.
        bos_id: the id that starts every target.
        eos_id: the id that ends a sentence.

    Returns:
        `(tokens, scores)`: int32 (B, T) without BOS, `pad_id` after EOS, and float32 (B,).

    Example (not run as a doctest: it needs a trained model):

    ```python
    tokens, scores = greedy_search(model, source_ids, num_steps=32)
    ```
    """
    return _token_search(
        model,
        source_ids,
        max_lengths,
        num_steps,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        length_penalty=length_penalty,
        bos_id=bos_id,
        eos_id=eos_id,
        do_sample=False,
    )


def sample(
    model,
    source_ids: Any,
    max_lengths: Any = None,
    num_steps: int | Any = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: Any = None,
    min_length: int = 0,
    no_repeat_ngram_size: int = 0,
    length_penalty: float = 0.0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Ancestral sampling with the key/value cache, as one `tf.while_loop`.

    Tokens are drawn (Gumbel-max, stateless random ops) from the logits divided by
    `temperature`, restricted to the `top_k` best and/or to the smallest set holding `top_p`
    of the probability (nucleus sampling). The same `seed` gives the same output.

    Args:
        model: a `Transformer`.
        source_ids: int (B, S) padded source ids.
        max_lengths: optional int (B,) per-sentence length limits.
        num_steps: the output length T (cache length).
        temperature: > 0; lower is greedier.
        top_k: keep only the `top_k` most likely tokens; `top_k=1` is greedy search.
        top_p: keep the smallest set of tokens whose probability reaches `top_p`.
        seed: int64 (2,) seed of the stateless sampler.
        min_length: EOS is forbidden while fewer than `min_length` tokens were emitted.
        no_repeat_ngram_size: see `greedy_search`.
        length_penalty: the GNMT alpha used for the returned scores (the model's
            untempered log-probabilities of the drawn tokens).
        bos_id: the id that starts every target.
        eos_id: the id that ends a sentence.

    Returns:
        `(tokens, scores)`: int32 (B, T) and float32 (B,).
    """
    return _token_search(
        model,
        source_ids,
        max_lengths,
        num_steps,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        length_penalty=length_penalty,
        bos_id=bos_id,
        eos_id=eos_id,
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
