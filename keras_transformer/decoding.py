"""Batched, cached decoding: greedy search, beam search and sampling.

Every search runs the whole generation as one `tf.while_loop` over fixed shapes: the
encoder runs once, the cross-attention keys/values are projected once
(`Transformer.init_decoding_cache`), and each step feeds one token per hypothesis through
`Transformer.decode_step`, which writes its keys/values into a self-attention cache of
fixed length `num_steps`. Token `t` of the output sits at decoder position `t + 1` (position
0 holds BOS).

The model is anything with `pad_id`, `max_length`, `encode`, `init_decoding_cache` and
`decode_step`: the `Transformer`, or the decoder-only `TransformerDecoderModel`, whose
"source" is the prompt (each output then holds the prompt, then its continuation).

Two layers of API:

- Graph functions, usable inside any `tf.function` (with or without XLA) and in an exported
  SavedModel: `greedy_search`, `sample`, `beam_search` and `max_decode_lengths`. They take
  padded source ids and return padded target ids (no BOS; EOS kept; `pad_id` after EOS)
  and scores.
- `BatchDecoder`: a callable that pads a batch up to a few fixed shape buckets (batch size,
  source length, target length), compiles one function per bucket (XLA when it works,
  plain `tf.function` otherwise) and caches it, so a stream of batches of different shapes
  traces only a handful of times and never returns to Python between tokens.

Scores are sums of the model's log-probabilities of the emitted tokens (EOS included)
divided by the GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al. 2016), where
`length` counts the emitted tokens; `alpha=0` gives plain log-probabilities.

Each sentence stops at EOS or at its own maximum length
`min(max_length, max_length_a * source_length + max_length_b)` (a sentence cut there has no
EOS). PAD and BOS are never generated.

Example:

```python
decoder = BatchDecoder(model, method="beam", beam_size=4, length_penalty=0.6)
output = decoder(source_ids)  # source_ids: int (B, S) padded with model.pad_id
output.tokens  # np.ndarray (B, 4, T): the n-best, best first
output.scores  # np.ndarray (B, 4)
```
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.constants import (
    BOS_ID,
    DECODING_METHODS,
    DEFAULT_LENGTH_PENALTY,
    DEFAULT_MAX_LENGTH_A,
    DEFAULT_MAX_LENGTH_B,
    EOS_ID,
    JIT_COMPILE_OPTIONS,
)
from keras_transformer.validation import (
    check_int,
    check_lengths,
    check_non_negative_float,
    check_non_negative_int,
    check_one_of,
    check_optional,
    check_positive_float,
    check_positive_int,
    check_probability,
)

logger = logging.getLogger(__name__)

DEFAULT_LENGTH_BUCKETS = (16, 32, 64, 128, 256, 512, 1024)

_NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------
# Graph functions.


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
    return tf.where(forbidden, tf.constant(_NEG_INF, log_probs.dtype), log_probs)


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
    neg_inf = tf.constant(_NEG_INF, logits.dtype)
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
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed=None,
):
    """Greedy search or ancestral sampling: one hypothesis per sentence."""
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
        length_penalty=length_penalty,
        bos_id=bos_id,
        eos_id=eos_id,
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )


def beam_search(
    model,
    source_ids: Any,
    max_lengths: Any = None,
    num_steps: int | Any = None,
    *,
    beam_size: int = 4,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    early_stopping: bool = False,
    min_length: int = 0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search with the key/value cache, as one `tf.while_loop`.

    The "alive/finished" formulation (tensor2tensor, fairseq): the beam state is flattened
    to (B*K, ...) for the model and its cache; each step takes the 2K best extensions of
    the K alive hypotheses, moves those that end (EOS, or the sentence's maximum length)
    and rank among the K best into the finished set (scored with the length penalty), keeps
    the K best that do not end as the alive set, and reorders the cache with a gather on
    their parent beams. A sentence is done when its K finished hypotheses all score at
    least the best score an alive one could still reach (`early_stopping=False`, exact for
    `length_penalty >= 0`), or as soon as it has K finished ones (`early_stopping=True`).
    With `beam_size=1` and `length_penalty=0` (or `early_stopping=True`) this is greedy
    search.

    Args:
        model: a `Transformer`.
        source_ids: int (B, S) padded source ids.
        max_lengths: optional int (B,) per-sentence length limits.
        num_steps: the output length T (cache length).
        beam_size: K, the number of hypotheses kept (and returned).
        length_penalty: the GNMT alpha >= 0.
        early_stopping: stop a sentence once it has K finished hypotheses.
        min_length: EOS is forbidden while fewer than `min_length` tokens were emitted.
        bos_id: the id that starts every target.
        eos_id: the id that ends a sentence.

    Returns:
        `(tokens, scores)`: int32 (B, K, T) and float32 (B, K), best first.

    Example (not run as a doctest: it needs a trained model):

    ```python
    tokens, scores = beam_search(model, source_ids, num_steps=32, beam_size=4)
    ```
    """
    beam_size = check_positive_int("beam_size", beam_size)
    length_penalty = check_non_negative_float("length_penalty", length_penalty)
    pad_id = model.pad_id
    k = beam_size
    batch_size, max_lengths, num_steps = _resolve_lengths(source_ids, max_lengths, num_steps)
    source_mask, cache, cross_cache = _prepare(model, source_ids, num_steps, repeat=k)
    batch_offsets = tf.range(batch_size)[:, None] * k  # (B, 1)
    best_possible_penalty = gnmt_length_penalty(max_lengths, length_penalty)  # (B,)
    neg_inf = tf.constant(_NEG_INF, tf.float32)

    def done(alive_log_probs, finished_scores):
        if early_stopping:
            return finished_scores[:, -1] > neg_inf  # (B,)
        # log-probabilities only decrease and the penalty grows with the length, so an
        # alive hypothesis can at best reach its current log-prob over the largest penalty.
        best_alive = alive_log_probs[:, 0] / best_possible_penalty  # (B,)
        return finished_scores[:, -1] >= best_alive  # (B,)

    def cond(step, alive_seq, alive_log_probs, cache, finished_seq, finished_scores):
        return tf.logical_and(
            step < num_steps, tf.logical_not(tf.reduce_all(done(alive_log_probs, finished_scores)))
        )

    def body(step, alive_seq, alive_log_probs, cache, finished_seq, finished_scores):
        total = tf.shape(alive_seq)[-1]  # 1 + T
        flat_seq = tf.reshape(alive_seq, [batch_size * k, total])  # (B*K, 1 + T)
        inputs = _get_column(flat_seq, step)  # (B*K, 1)
        logits, cache = model.decode_step(inputs, source_mask, cache, cross_cache, step)
        log_probs = _mask_special(
            tf.nn.log_softmax(tf.cast(logits[:, 0, :], tf.float32)),
            step,
            bos_id=bos_id,
            pad_id=pad_id,
            eos_id=eos_id,
            min_length=min_length,
        )  # (B*K, V)
        vocab_size = tf.shape(log_probs)[-1]
        log_probs = tf.reshape(log_probs, [batch_size, k, vocab_size])  # (B, K, V)
        candidates = tf.reshape(
            alive_log_probs[:, :, None] + log_probs, [batch_size, k * vocab_size]
        )  # (B, K*V)
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * k)  # (B, 2K)
        parents = top_indices // vocab_size  # (B, 2K)
        tokens = top_indices % vocab_size  # (B, 2K)
        top_seq = tf.gather(alive_seq, parents, batch_dims=1)  # (B, 2K, 1 + T)
        top_seq = _set_column(top_seq, step + 1, tokens)
        ends = tf.logical_or(
            tf.equal(tokens, eos_id), (step + 1 >= max_lengths)[:, None]
        )  # (B, 2K)
        valid = top_log_probs > neg_inf  # (B, 2K)

        # Alive: the K best extensions that do not end.
        alive_candidates = tf.where(ends, neg_inf, top_log_probs)  # (B, 2K)
        alive_log_probs, selected = tf.math.top_k(alive_candidates, k=k)  # (B, K)
        alive_seq = tf.gather(top_seq, selected, batch_dims=1)  # (B, K, 1 + T)
        alive_parents = tf.gather(parents, selected, batch_dims=1)  # (B, K)
        parent_rows = tf.reshape(batch_offsets + alive_parents, [-1])  # (B*K,)
        cache = tf.nest.map_structure(lambda c: tf.gather(c, parent_rows, axis=0), cache)

        # Finished: the extensions that end and rank among the K best.
        rank_ok = tf.range(2 * k)[None, :] < k  # (1, 2K)
        new_finished = tf.logical_and(tf.logical_and(ends, valid), rank_ok)  # (B, 2K)
        penalty = gnmt_length_penalty(step + 1, length_penalty)
        new_scores = tf.where(new_finished, top_log_probs / penalty, neg_inf)  # (B, 2K)
        all_scores = tf.concat([finished_scores, new_scores], axis=1)  # (B, 3K)
        all_seq = tf.concat([finished_seq, top_seq], axis=1)  # (B, 3K, 1 + T)
        finished_scores, selected = tf.math.top_k(all_scores, k=k)  # (B, K)
        finished_seq = tf.gather(all_seq, selected, batch_dims=1)  # (B, K, 1 + T)
        return step + 1, alive_seq, alive_log_probs, cache, finished_seq, finished_scores

    initial_seq = tf.reshape(
        _initial_sequences(batch_size * k, num_steps, bos_id, pad_id), [batch_size, k, -1]
    )  # (B, K, 1 + T)
    # Only the first beam is alive at the start, so the K beams do not repeat each other.
    initial_log_probs = tf.tile(
        tf.concat([tf.zeros([1, 1]), tf.fill([1, k - 1], _NEG_INF)], axis=1), [batch_size, 1]
    )  # (B, K)
    initial = (
        tf.constant(0, tf.int32),
        initial_seq,
        initial_log_probs,
        cache,  # N x 2 x (B*K, H, T, Dh)
        initial_seq,
        tf.fill([batch_size, k], _NEG_INF),
    )
    _, alive_seq, alive_log_probs, _, finished_seq, finished_scores = tf.while_loop(
        cond, body, initial, maximum_iterations=num_steps
    )
    # A sentence without any finished hypothesis (only possible when fewer than K tokens
    # can be emitted) falls back to its alive ones.
    has_finished = (finished_scores[:, 0] > neg_inf)[:, None]  # (B, 1)
    alive_scores = alive_log_probs / gnmt_length_penalty(num_steps, length_penalty)
    scores = tf.where(has_finished, finished_scores, alive_scores)  # (B, K)
    sequences = tf.where(has_finished[:, :, None], finished_seq, alive_seq)  # (B, K, 1 + T)
    return sequences[:, :, 1:], scores


# ---------------------------------------------------------------------------------------
# Bucketed, compiled decoding.


@dataclass(frozen=True)
class DecodeOutput:
    """The result of a `BatchDecoder` call.

    Attributes:
        tokens: int32 (B, K, T): K hypotheses per sentence (K = 1 for greedy and sampling),
            best first, without BOS, EOS kept, `pad_id` after it.
        scores: float32 (B, K): length-penalized log-probabilities.
    """

    tokens: np.ndarray
    scores: np.ndarray


def bucket(value: int, buckets: tuple[int, ...], cap: int | None = None) -> int:
    """The smallest bucket >= `value` (then capped at `cap`); `value` itself past the last.

    Example:
    >>> bucket(20, (16, 32, 64))
    32
    """
    chosen = next((b for b in buckets if b >= value), value)
    if cap is not None:
        chosen = min(chosen, max(cap, value))
    return int(chosen)


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(value, 1))))


class BatchDecoder:
    """Decodes padded batches of source ids with compiled, shape-bucketed search loops.

    Each call pads the batch size up to a power of two, the source length and the target
    length up to the next of `length_buckets` (capped at `model.max_length`), and runs the
    function compiled for that bucket: one `tf.function` per bucket, traced once, holding the
    whole search as a `tf.while_loop` (no Python between tokens). With
    `jit_compile="auto"` the function is compiled with XLA; if XLA fails, the error is
    logged once and every later call uses a plain `tf.function`.

    Args:
        model: a `Transformer`.
        method: `"greedy"`, `"beam"` or `"sample"`; by default beam search when
            `beam_size > 1`, else greedy search.
        beam_size: K for `"beam"`.
        length_penalty: the GNMT alpha (beam ranking; the score of every method).
        early_stopping: see `beam_search`.
        max_length: the absolute limit of output tokens; defaults to `model.max_length`.
        max_length_a: the per-sentence limit is `min(max_length, a * source_length + b)`.
        max_length_b: see `max_length_a`.
        min_length: EOS is forbidden while fewer tokens were emitted.
        temperature: sampling temperature.
        top_k: sampling restricted to the `top_k` best tokens.
        top_p: nucleus sampling mass.
        seed: the sampling seed; call `i` of a decoder uses the stream `(seed, i)`, so a new
            decoder with the same seed repeats the same outputs.
        jit_compile: `True` (XLA, errors raised), `False` (plain `tf.function`) or `"auto"`
            (XLA with a fallback).
        length_buckets: source and target lengths are padded up to one of these.
        bos_id: the id that starts every target.
        eos_id: the id that ends a sentence.

    Call arguments:
        source_ids: int (B, S) source ids padded with `model.pad_id` (numpy or tensor).

    Returns:
        A `DecodeOutput` with numpy `tokens` (B, K, T) and `scores` (B, K).

    Example (not run as a doctest: it needs a trained model):

    ```python
    decoder = BatchDecoder(model, method="beam", beam_size=4)
    decoder(np.array([[5, 6, 7, 0], [8, 9, 0, 0]])).tokens.shape
    # (2, 4, 16)
    ```
    """

    def __init__(
        self,
        model,
        method: str | None = None,
        beam_size: int = 4,
        length_penalty: float = DEFAULT_LENGTH_PENALTY,
        early_stopping: bool = False,
        max_length: int | None = None,
        max_length_a: float = DEFAULT_MAX_LENGTH_A,
        max_length_b: int = DEFAULT_MAX_LENGTH_B,
        min_length: int = 0,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 0,
        jit_compile: bool | str = "auto",
        length_buckets: tuple[int, ...] = DEFAULT_LENGTH_BUCKETS,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ):
        self.model = model
        self.beam_size = check_positive_int("beam_size", beam_size)
        if method is None:
            method = "beam" if self.beam_size > 1 else "greedy"
        self.method = check_one_of("method", method, DECODING_METHODS)
        self.length_penalty = check_non_negative_float("length_penalty", length_penalty)
        self.early_stopping = bool(early_stopping)
        model_max = int(model.max_length)
        if max_length is None:
            max_length = model_max
        self.max_length = check_positive_int("max_length", max_length)
        if self.max_length > model_max:
            raise ValueError(
                "Received an invalid value for argument `max_length`, expected at most the "
                f"model's `max_length`={model_max}. Received: max_length={max_length}"
            )
        self.max_length_a = check_non_negative_float("max_length_a", max_length_a)
        self.max_length_b = check_non_negative_int("max_length_b", max_length_b)
        self.min_length = check_non_negative_int("min_length", min_length)
        self.temperature = check_positive_float("temperature", temperature)
        self.top_k = check_optional(check_positive_int, "top_k", top_k)
        self.top_p = check_optional(check_probability, "top_p", top_p)
        self.seed = check_int("seed", seed)
        self.jit_compile = check_one_of("jit_compile", jit_compile, JIT_COMPILE_OPTIONS)
        self.length_buckets = tuple(sorted(set(check_lengths("length_buckets", length_buckets))))
        self.bos_id = bos_id
        self.eos_id = eos_id
        self._functions: dict[bool, Any] = {}
        self._xla_failed = False
        self._calls = 0

    @property
    def num_hypotheses(self) -> int:
        """K: hypotheses returned per sentence."""
        return self.beam_size if self.method == "beam" else 1

    @property
    def uses_xla(self) -> bool:
        """Whether calls currently run XLA-compiled functions."""
        return self.jit_compile is True or (self.jit_compile == "auto" and not self._xla_failed)

    def search(self, source_ids, max_lengths, num_steps, seed=None):
        """The search of this decoder's method as graph ops (no padding, no compilation).

        Args:
            source_ids: int (B, S).
            max_lengths: int (B,) per-sentence limits.
            num_steps: the output length T (int or scalar tensor).
            seed: int64 (2,) sampling seed.

        Returns:
            `(tokens (B, K, T), scores (B, K))`.
        """
        common = {"min_length": self.min_length, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if self.method == "beam":
            return beam_search(
                self.model,
                source_ids,
                max_lengths,
                num_steps,
                beam_size=self.beam_size,
                length_penalty=self.length_penalty,
                early_stopping=self.early_stopping,
                **common,
            )
        if self.method == "greedy":
            tokens, scores = greedy_search(
                self.model,
                source_ids,
                max_lengths,
                num_steps,
                length_penalty=self.length_penalty,
                **common,
            )
        else:
            tokens, scores = sample(
                self.model,
                source_ids,
                max_lengths,
                num_steps,
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                seed=seed,
                length_penalty=self.length_penalty,
                **common,
            )
        return tokens[:, None, :], scores[:, None]

    def _function(self, jit: bool):
        function = self._functions.get(jit)
        if function is None:

            def run(source_ids, max_lengths, seed, num_steps):
                return self.search(source_ids, max_lengths, num_steps, seed)

            # One function per XLA setting; each shape bucket (the input shapes and the
            # Python int `num_steps`) is one trace of it.
            function = tf.function(run, jit_compile=jit)
            self._functions[jit] = function
        return function

    def shapes_for(self, batch_size: int, source_length: int, target_length: int) -> tuple:
        """The padded `(batch, source length, output length)` bucket of a batch."""
        model_max = int(self.model.max_length)
        return (
            _power_of_two_at_least(batch_size),
            bucket(source_length, self.length_buckets, cap=model_max),
            bucket(target_length, self.length_buckets, cap=self.max_length),
        )

    def __call__(self, source_ids: Any) -> DecodeOutput:
        source_ids = np.asarray(source_ids, dtype=np.int32)
        if source_ids.ndim != 2:
            raise ValueError(
                "Received an invalid value for argument `source_ids`, expected int ids of "
                f"shape (batch, length). Received: source_ids.shape={source_ids.shape}"
            )
        batch_size, source_length = source_ids.shape
        pad_id = int(self.model.pad_id)
        model_max = int(self.model.max_length)
        if source_length > model_max:
            raise ValueError(
                f"Received source ids of length {source_length}, longer than the model's "
                f"`max_length`={model_max}. Truncate them first."
            )
        if batch_size == 0:
            k = self.num_hypotheses
            return DecodeOutput(np.zeros((0, k, 0), np.int32), np.zeros((0, k), np.float32))
        max_lengths = max_decode_lengths(
            source_ids, pad_id, self.max_length, self.max_length_a, self.max_length_b
        ).numpy()  # (B,)
        key = self.shapes_for(batch_size, max(source_length, 1), int(max_lengths.max()))
        padded_batch, padded_source, num_steps = key
        source = np.full((padded_batch, padded_source), pad_id, np.int32)
        source[:batch_size, :source_length] = source_ids
        limits = np.ones((padded_batch,), np.int32)  # padding rows stop after one token
        limits[:batch_size] = max_lengths
        seed = tf.constant([self.seed, self._calls], tf.int64)
        self._calls += 1
        tokens, scores = self._run(key, tf.constant(source), tf.constant(limits), seed)
        tokens = np.asarray(tokens)[:batch_size]
        scores = np.asarray(scores)[:batch_size]
        return DecodeOutput(tokens=tokens, scores=scores)

    def _run(self, key, source, limits, seed):
        if self.uses_xla:
            try:
                return self._function(True)(source, limits, seed, key[2])
            except (tf.errors.OpError, NotImplementedError, ValueError, TypeError) as e:
                if self.jit_compile is True:
                    raise
                self._xla_failed = True
                logger.warning(
                    "XLA compilation of the decoding loop failed; falling back to a plain "
                    "tf.function for this decoder. The error was: %s",
                    str(e).splitlines()[0] if str(e) else type(e).__name__,
                )
        return self._function(False)(source, limits, seed, key[2])
