"""Repeated n-gram blocking (`no_repeat_ngram_size`), the guard against looping output.

A search that blocks n-grams of size n gives zero probability, at each step, to every token
that would complete an n-gram already in the hypothesis, so no n consecutive tokens occur
twice in an output. This is fairseq's `--no-repeat-ngram-size`, Hugging Face's and
CTranslate2's `no_repeat_ngram_size`: 0 (the default everywhere) turns it off. The
hypothesis counted is everything at the decoder's positions so far: BOS (never generated,
so it completes nothing) and, for the decoder-only model, the prompt, as in Hugging Face.

A ban never leaves a hypothesis without a token: where it would forbid every token still
allowed (the decoder-only model's prompt positions, which `decode_step` makes certain, when
the prompt itself repeats an n-gram), that hypothesis's step is left as it was.

Example:

```python
sequences = tf.constant([[1, 7, 8, 9, 7, 8, 0]])  # BOS, then 7 8 9 7 8; column 5 is the last
log_probs = ban_repeated_ngrams(log_probs, sequences, step=5, size=3)
# the token 9 is banned: "7 8 9" is in the hypothesis already
```
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def ban_repeated_ngrams(
    log_probs: tf.Tensor, sequences: tf.Tensor, step: Any, size: int
) -> tf.Tensor:
    """Sets to -inf the log-probability of each token that would repeat an n-gram.

    Traceable in any `tf.function`, with or without XLA: fixed shapes, one gather and one
    scatter a step.

    Args:
        log_probs: float (R, V), the next token's log-probabilities of each hypothesis.
        sequences: int (R, L), each hypothesis's tokens at decoder positions 0..L-1; the
            columns 0..`step` are filled (column `step` holds the token fed at this step).
        step: int scalar, the column of the last token.
        size: n, the n-gram size (>= 1); 0 returns `log_probs` unchanged.

    Returns:
        `log_probs` with the banned tokens at -inf, (R, V).
    """
    if size <= 0:
        return log_probs
    rows, length = tf.shape(sequences)[0], tf.shape(sequences)[1]
    vocab_size = tf.shape(log_probs)[-1]
    starts = tf.range(length)  # (L,): an n-gram starts at each column
    columns = tf.minimum(starts[:, None] + tf.range(size)[None, :], length - 1)  # (L, n)
    ngrams = tf.gather(sequences, columns, axis=1)  # (R, L, n)
    # The last n - 1 tokens, which each earlier n-gram's first n - 1 are compared with.
    last = tf.maximum(step - (size - 1) + 1 + tf.range(size - 1), 0)  # (n - 1,)
    suffix = tf.gather(sequences, last, axis=1)  # (R, n - 1)
    # An n-gram counts once all its tokens are in: it ends at column `step` at the latest.
    complete = starts + size - 1 <= step  # (L,)
    matches = tf.logical_and(
        tf.reduce_all(tf.equal(ngrams[:, :, : size - 1], suffix[:, None, :]), axis=-1),
        complete[None, :],
    )  # (R, L)
    row_ids = tf.broadcast_to(tf.range(rows)[:, None], tf.shape(matches))  # (R, L)
    indices = tf.stack([row_ids, ngrams[:, :, size - 1]], axis=-1)  # (R, L, 2)
    hits = tf.scatter_nd(
        tf.reshape(indices, [-1, 2]),
        tf.reshape(tf.cast(matches, tf.float32), [-1]),
        tf.stack([rows, vocab_size]),
    )  # (R, V): how many earlier n-grams each token would repeat
    neg_inf = tf.constant(float("-inf"), log_probs.dtype)
    banned = tf.where(hits > 0, neg_inf, log_probs)  # (R, V)
    any_left = tf.reduce_any(banned > neg_inf, axis=-1, keepdims=True)  # (R, 1)
    return tf.where(any_left, banned, log_probs)
