"""`TextGenerator`: a prompt in, its continuation out, with a trained language model.

It tokenizes prompts (keeping their last `max_length - 1` pieces), decodes them in batches
with a `keras_transformer.decoding.BatchDecoder` (the prompt is the search's source: see
`TransformerDecoderModel`), removes the prompt from each output and detokenizes. Each
prompt gets at most `max_new_tokens` new tokens (the decoder's per-sentence limit
`min(max_length, 1 * prompt_tokens + max_new_tokens)`); a continuation ends at EOS.

`generate_strings` is the same pipeline as pure TensorFlow ops, for export.

Example (not run as a doctest: it needs a trained run directory):

```python
generator = TextGenerator.from_run_dir("runs/lm", max_new_tokens=30, method="sample",
                                       top_p=0.9)
generator.generate(["The old dog"])  # [" watches a red film."]
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer import decoding as decoding_module
from keras_transformer.validation import check_positive_int, check_tokenizer_pad_id


def strip_prompts(tokens: tf.Tensor, prompt_lengths: tf.Tensor, pad_id: int) -> tf.Tensor:
    """Removes each row's prompt from search outputs (B, K, T): `tokens[b, k, L_b:]`,
    padded with `pad_id` to (B, K, T)."""
    steps = tf.shape(tokens)[2]
    index = tf.cast(prompt_lengths, tf.int32)[:, None, None] + tf.range(steps)[None, None, :]
    index = tf.broadcast_to(index, tf.shape(tokens))  # (B, K, T)
    taken = tf.gather(tokens, tf.minimum(index, steps - 1), axis=2, batch_dims=2)
    return tf.where(index < steps, taken, tf.constant(pad_id, tokens.dtype))


class TextGenerator:
    """Continues prompts with a `TransformerDecoderModel` and its `SubwordTokenizer`.

    Args:
        model: the trained language model.
        tokenizer: its tokenizer.
        max_new_tokens: the most tokens generated after each prompt.
        batch_size: prompts decoded at once.
        **decoding: `decoding.BatchDecoder`'s search arguments: `method`, `beam_size`,
            `length_penalty`, `max_length` (of prompt and continuation together),
            `min_length` (counting the prompt's tokens), `temperature`, `top_k`, `top_p`,
            `seed`, `jit_compile`, `early_stopping`, `length_buckets`.
    """

    def __init__(
        self,
        model,
        tokenizer,
        max_new_tokens: int = 50,
        batch_size: int = 64,
        **decoding: Any,
    ):
        for name in ("max_length_a", "max_length_b"):
            if name in decoding:
                raise ValueError(
                    f"Received `{name}`; a generator's length limit is `max_new_tokens` "
                    "tokens after each prompt."
                )
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.decoder = decoding_module.BatchDecoder(
            model,
            max_length_a=1.0,
            max_length_b=self.max_new_tokens,
            bos_id=int(tokenizer.bos_id),
            eos_id=int(tokenizer.eos_id),
            **decoding,
        )
        check_tokenizer_pad_id(tokenizer, model)

    @classmethod
    def from_run_dir(cls, path: str, **kwargs: Any) -> TextGenerator:
        """Loads the model and tokenizer of a language-modelling run directory."""
        from keras_transformer.run_dir import load_run

        model, tokenizer, _ = load_run(path)
        return cls(model, tokenizer, **kwargs)

    @property
    def method(self) -> str:
        return self.decoder.method

    @property
    def beam_size(self) -> int:
        return self.decoder.beam_size

    @property
    def length_penalty(self) -> float:
        return self.decoder.length_penalty

    def _prompt_ids(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Each prompt's ids, its last `max_length - 1` (room for BOS): int32 (N, None)."""
        ragged = tf.cast(self.tokenizer.tokenize(strings), tf.int32)
        return ragged[:, -(int(self.model.max_length) - 1) :]

    def generate_strings_nbest(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        """Continues a `tf.string` tensor (N,) of prompts with TensorFlow ops only.

        Every hypothesis (K: the beam size, 1 for greedy search and sampling), best first;
        sampling uses the seed `(seed, 0)`.

        Returns:
            `{"continuations": tf.string (N, K), "texts": tf.string (N, K), "scores":
            float32 (N, K)}`: the text after the prompt (with its leading space when it
            starts a new word), the prompt and continuation together, and the
            continuation's log-probability (length-penalized).
        """
        decoder, pad_id = self.decoder, int(self.model.pad_id)
        strings = tf.convert_to_tensor(strings, tf.string)
        ragged = self._prompt_ids(strings)  # (N, None)
        prompt_ids = ragged.to_tensor(default_value=pad_id)
        width = tf.shape(prompt_ids)[1]
        prompt_ids = tf.pad(prompt_ids, [[0, 0], [0, tf.maximum(1 - width, 0)]])  # (N, P)
        max_lengths = decoding_module.max_decode_lengths(
            prompt_ids, pad_id, decoder.max_length, 1.0, self.max_new_tokens
        )  # (N,)
        num_steps = tf.reduce_max(tf.concat([max_lengths, [1]], 0))
        seed = tf.constant([decoder.seed, 0], tf.int64)
        tokens, scores = decoder.search(prompt_ids, max_lengths, num_steps, seed)  # (N, K, T)
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, (shape[0] * shape[1], shape[2])))
        prompts = tf.repeat(self.tokenizer.detokenize(ragged), shape[1])  # (N*K,)
        start = tf.strings.length(prompts)
        continuations = tf.strings.substr(texts, start, tf.strings.length(texts) - start)
        return {
            "continuations": tf.reshape(continuations, shape[:2]),
            "texts": tf.reshape(texts, shape[:2]),
            "scores": scores,
        }

    def generate_strings(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        """Like `generate_strings_nbest`, the best hypothesis only: (N,) each."""
        return {k: v[:, 0] for k, v in self.generate_strings_nbest(strings).items()}

    def serving_function(self) -> tf.types.experimental.PolymorphicFunction:
        """`generate_strings` as a `tf.function` over `tf.TensorSpec([None], tf.string)`."""
        return tf.function(
            self.generate_strings,
            input_signature=[tf.TensorSpec([None], tf.string, name="prompts")],
        )

    def generate_ids(self, prompt_ids: list[np.ndarray]) -> tuple[list, list]:
        """Continues prompts given as ids.

        Args:
            prompt_ids: one int array of ids per prompt (no BOS), at most
                `model.max_length - 1` ids each.

        Returns:
            `(tokens, scores)`: per prompt, int32 (K, T) continuations (EOS kept, padded)
            and float32 (K,) scores.
        """
        pad_id = int(self.model.pad_id)
        tokens: list[Any] = []
        scores: list[Any] = []
        for start in range(0, len(prompt_ids), self.batch_size):
            chunk = [np.asarray(p, np.int32) for p in prompt_ids[start : start + self.batch_size]]
            width = max(1, max(len(p) for p in chunk))
            batch = np.full((len(chunk), width), pad_id, np.int32)
            for row, prompt in enumerate(chunk):
                batch[row, : len(prompt)] = prompt
            output = self.decoder(batch)  # (b, K, T)
            lengths = np.array([len(p) for p in chunk])
            stripped = strip_prompts(tf.constant(output.tokens), lengths, pad_id).numpy()
            tokens.extend(stripped)
            scores.extend(output.scores)
        return tokens, scores

    def generate_nbest(
        self, prompts: Iterable[str], n: int | None = None
    ) -> list[list[tuple[str, float]]]:
        """The `n` best continuations of each prompt with their scores, best first."""
        prompts = _as_prompts(prompts)
        available = self.decoder.num_hypotheses
        n = available if n is None else check_positive_int("n", n)
        if n > available:
            raise ValueError(
                f"Received an invalid value for argument `n`, expected at most {available} "
                f"(the hypotheses this generator keeps). Received: n={n}"
            )
        if not prompts:
            return []
        strings = tf.constant(prompts, tf.string)
        ids = [np.asarray(row, np.int32) for row in self._prompt_ids(strings).to_list()]
        tokens, scores = self.generate_ids(ids)
        results = []
        for prompt, hypotheses, hypothesis_scores in zip(ids, tokens, scores):
            full = [np.concatenate([prompt, h]) for h in hypotheses[:n]]
            width = max(len(f) for f in full)
            batch = np.zeros((len(full), width), np.int32)
            for row, f in enumerate(full):
                batch[row, : len(f)] = f
            texts = self.tokenizer.detokenize(tf.constant(batch)).numpy()
            prefix = len(self.tokenizer.detokenize(tf.constant(prompt[None])).numpy()[0])
            results.append(
                [(t[prefix:].decode("utf-8"), float(s)) for t, s in zip(texts, hypothesis_scores)]
            )
        return results

    def generate(self, prompts: Iterable[str]) -> list[str]:
        """The best continuation of each prompt (with its leading space, if any)."""
        return [best[0][0] for best in self.generate_nbest(prompts, n=1)]


def _as_prompts(prompts: Iterable[str]) -> list[str]:
    if isinstance(prompts, (str, bytes)):
        raise ValueError(
            "Received an invalid value for argument `prompts`, expected a list of strings, "
            f"not a single string. Received: prompts={prompts!r:.80}"
        )
    return [p.decode("utf-8") if isinstance(p, bytes) else str(p) for p in prompts]
