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

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.data import encoding
from keras_transformer.predictors.base import DecodingPredictor, as_texts, pad_rows
from keras_transformer.validation import check_positive_int, check_tokenizer_pad_id


class TextGenerator(DecodingPredictor):
    """Continues prompts with a `TransformerDecoderModel` and its `SubwordTokenizer`.

    Args:
        model: the trained language model.
        tokenizer: its tokenizer.
        max_new_tokens: the most tokens generated after each prompt.
        batch_size: prompts decoded at once.
        quantize: the weight type to decode in (`keras_transformer.quantization`), None for
            the model's own.
        **decoding: `decoding.BatchDecoder`'s search arguments: `method`, `beam_size`,
            `length_penalty`, `max_length` (of prompt and continuation together),
            `min_length` (counting the prompt's tokens), `temperature`, `top_k`, `top_p`,
            `seed`, `jit_compile`, `early_stopping`, `length_buckets`.
    """

    task = "language_modeling"
    serving_input = "prompts"
    progress_description = "generating"
    # The length limit counts new tokens: `max_length_a=1`, `max_length_b=max_new_tokens`.
    fixed_decoding = ("max_length_a", "max_length_b")

    def __init__(
        self,
        model,
        tokenizer,
        max_new_tokens: int = 50,
        batch_size: int = 64,
        quantize: str | None = None,
        **decoding: Any,
    ):
        for name in self.fixed_decoding:
            if name in decoding:
                raise ValueError(
                    f"Received `{name}`; a generator's length limit is `max_new_tokens` "
                    "tokens after each prompt."
                )
        self.max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        super().__init__(
            model,
            tokenizer,
            batch_size,
            quantize,
            max_length_a=1.0,
            max_length_b=self.max_new_tokens,
            **decoding,
        )
        self.tokenizer = tokenizer
        check_tokenizer_pad_id(tokenizer, model)

    @classmethod
    def _from_run(cls, path: str, **kwargs: Any) -> TextGenerator:
        """Loads the model and tokenizer of a language-modelling run directory
        (`TextGenerator.from_run_dir(path, **kwargs)`)."""
        from keras_transformer.run_dir import load_run

        model, tokenizer, _ = load_run(path)
        return cls(model, tokenizer, **kwargs)

    def _prompt_ids(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Each prompt's last `max_length - 1` ids (`data.encoding.prompt_ids`), of the
        search's `max_length` (at most the model's): the search cuts what is longer."""
        return encoding.prompt_ids(self.tokenizer, strings, self.decoder.max_length)

    def generate_strings_nbest(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        """Continues a `tf.string` tensor (N,) of prompts with TensorFlow ops only.

        Every hypothesis (K: the beam size, 1 for greedy search and sampling), best first;
        sampling uses the seed `(seed, 0)`.

        Returns:
            `{"continuations": tf.string (N, K), "texts": tf.string (N, K), "scores":
            float32 (N, K)}`: the text after the prompt (with its leading space when it
            starts a new word), the prompt as given and the continuation together, and
            the continuation's log-probability (length-penalized).
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        ragged = self._prompt_ids(strings)  # (N, None)
        _, tokens, scores = self._search_graph(ragged)  # (N, K, T), (N, K)
        shape = tf.shape(tokens)
        texts = self.tokenizer.detokenize(tf.reshape(tokens, (shape[0] * shape[1], shape[2])))
        prompts = tf.repeat(self.tokenizer.detokenize(ragged), shape[1])  # (N*K,)
        start = tf.strings.length(prompts)
        continuations = tf.strings.substr(texts, start, tf.strings.length(texts) - start)
        # The prompt as given (not as detokenized: its spaces, newlines and the pieces cut
        # before the last `max_length - 1`), as `predict` writes it.
        texts = tf.strings.join([tf.repeat(strings, shape[1]), continuations])  # (N*K,)
        return {
            "continuations": tf.reshape(continuations, shape[:2]),
            "texts": tf.reshape(texts, shape[:2]),
            "scores": scores,
        }

    def generate_strings(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        """Like `generate_strings_nbest`, the best hypothesis only: (N,) each."""
        return {k: v[:, 0] for k, v in self.generate_strings_nbest(strings).items()}

    def _serve(self, strings: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.generate_strings(strings)

    def generate_ids(
        self, prompt_ids: Sequence[np.ndarray], progress: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Continues prompts given as ids, in length-sorted batches.

        Args:
            prompt_ids: one int array of ids per prompt (no BOS), at most
                `model.max_length - 1` ids each.
            progress: show a progress bar.

        Returns:
            `(tokens, scores)`: per prompt, int32 (K, T) continuations (EOS kept, padded)
            and float32 (K,) scores, in the input order.
        """
        tokens, scores = self._decode_rows(prompt_ids, progress)
        pad_id = int(self.model.pad_id)
        continuations = []
        for prompt, hypotheses in zip(prompt_ids, tokens):  # (K, T): the prompt, then more
            rest = np.full_like(hypotheses, pad_id)
            rest[:, : hypotheses.shape[1] - len(prompt)] = hypotheses[:, len(prompt) :]
            continuations.append(rest)
        return continuations, scores

    def generate_nbest(
        self, prompts: Iterable[str], n: int | None = None, progress: bool = False
    ) -> list[list[tuple[str, float]]]:
        """The `n` best continuations of each prompt with their scores, best first.

        Args:
            prompts: the prompts.
            n: hypotheses per prompt, at most `beam_size` (the default).
            progress: show a progress bar.

        Returns:
            One list of `(continuation, score)` per prompt; a continuation starts with its
            leading space when it starts a new word.
        """
        prompts = as_texts(prompts, "prompts")
        n = self._check_n(n)
        if not prompts:
            return []
        strings = tf.constant(prompts, tf.string)
        ids = [np.asarray(row, np.int32) for row in self._prompt_ids(strings).to_list()]
        tokens, scores = self.generate_ids(ids, progress)
        pad_id, results = int(self.model.pad_id), []
        for prompt, hypotheses, hypothesis_scores in zip(ids, tokens, scores):
            full = pad_rows([np.concatenate([prompt, h]) for h in hypotheses[:n]], pad_id)
            texts = self.tokenizer.detokenize(tf.constant(full)).numpy()
            prefix = len(self.tokenizer.detokenize(tf.constant(prompt[None])).numpy()[0])
            results.append(
                [(t[prefix:].decode("utf-8"), float(s)) for t, s in zip(texts, hypothesis_scores)]
            )
        return results

    def generate(self, prompts: Iterable[str], progress: bool = False) -> list[str]:
        """The best continuation of each prompt (with its leading space, if any)."""
        return [best[0][0] for best in self.generate_nbest(prompts, n=1, progress=progress)]
