"""The bucketed decoding runtime: `BatchDecoder` pads a batch up to a few fixed shape
buckets (batch size, source length, target length), compiles one function per bucket (XLA
when it works, plain `tf.function` otherwise) and caches it, so a stream of batches of
different shapes traces only a handful of times and never returns to Python between tokens.

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
from keras_transformer.decoding.beam import beam_search
from keras_transformer.decoding.search import greedy_search, max_decode_lengths, sample
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


# BatchDecoder's arguments that `settings()` leaves out: how the search runs (compiled or
# not, padded to which lengths), not what it finds; the special ids are the vocabulary's.
SETTINGS_NOT_RECORDED = frozenset({"model", "jit_compile", "length_buckets", "bos_id", "eos_id"})


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
        no_repeat_ngram_size: n > 0 forbids every token that would repeat an n-gram of its
            hypothesis, the guard against looping output (`keras_transformer.decoding.ngrams`,
            fairseq's `--no-repeat-ngram-size`); 0 turns it off.
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
        no_repeat_ngram_size: int = 0,
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
        self.no_repeat_ngram_size = check_non_negative_int(
            "no_repeat_ngram_size", no_repeat_ngram_size
        )
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

    def settings(self) -> dict[str, Any]:
        """The search's settings as an export records them (`export_info.json`'s
        `decoding`): `beam_size` as the search uses it (1 for greedy search and sampling,
        whatever was asked), the sampling settings whatever the method: every argument
        that changes what the search finds (`SETTINGS_NOT_RECORDED` say how it runs)."""
        return {
            "method": self.method,
            "beam_size": self.num_hypotheses,
            "length_penalty": self.length_penalty,
            "early_stopping": self.early_stopping,
            "max_length": self.max_length,
            "max_length_a": self.max_length_a,
            "max_length_b": self.max_length_b,
            "min_length": self.min_length,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
        }

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
        common = {
            "min_length": self.min_length,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }
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
