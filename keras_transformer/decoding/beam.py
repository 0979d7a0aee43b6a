"""Beam search with the key/value cache, as one `tf.while_loop`.

Built from the pieces of `keras_transformer.decoding.search` (the same cache set-up, length
limits, special-token masking and GNMT length penalty as greedy search and sampling), and,
like them, traceable in any `tf.function` (with or without XLA) and in a SavedModel.

Example:

```python
tokens, scores = beam_search(model, source_ids, num_steps=32, beam_size=4)
tokens.shape  # (B, 4, 32): the n-best, best first
```
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.constants import BOS_ID, DEFAULT_LENGTH_PENALTY, EOS_ID
from keras_transformer.decoding.ngrams import ban_repeated_ngrams
from keras_transformer.decoding.search import (
    NEG_INF,
    _get_column,
    _initial_sequences,
    _mask_special,
    _prepare,
    _resolve_lengths,
    _set_column,
    gnmt_length_penalty,
)
from keras_transformer.validation import (
    check_non_negative_float,
    check_non_negative_int,
    check_positive_int,
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
    no_repeat_ngram_size: int = 0,
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
        no_repeat_ngram_size: n > 0 forbids every extension that would repeat an n-gram of
            its hypothesis (`keras_transformer.decoding.ngrams`); 0 (the default) does not.
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
    no_repeat_ngram_size = check_non_negative_int("no_repeat_ngram_size", no_repeat_ngram_size)
    pad_id = model.pad_id
    k = beam_size
    batch_size, max_lengths, num_steps = _resolve_lengths(source_ids, max_lengths, num_steps)
    source_mask, cache, cross_cache = _prepare(model, source_ids, num_steps, repeat=k)
    batch_offsets = tf.range(batch_size)[:, None] * k  # (B, 1)
    best_possible_penalty = gnmt_length_penalty(max_lengths, length_penalty)  # (B,)
    neg_inf = tf.constant(NEG_INF, tf.float32)

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
        log_probs = ban_repeated_ngrams(log_probs, flat_seq, step, no_repeat_ngram_size)
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
        tf.concat([tf.zeros([1, 1]), tf.fill([1, k - 1], NEG_INF)], axis=1), [batch_size, 1]
    )  # (B, K)
    initial = (
        tf.constant(0, tf.int32),
        initial_seq,
        initial_log_probs,
        cache,  # N x 2 x (B*K, H, T, Dh)
        initial_seq,
        tf.fill([batch_size, k], NEG_INF),
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
