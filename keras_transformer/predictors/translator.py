"""`Translator`: sentences in, translations out.

It tokenizes with the source `SubwordTokenizer`, sorts the sentences by length, decodes them
in batches with a `keras_transformer.decoding.BatchDecoder` (cached, XLA-compiled, shape
buckets) and detokenizes with the target tokenizer, restoring the input order.

For export, `Translator.translate_strings` is the same pipeline as pure TensorFlow ops
(tf-text tokenization, one `tf.while_loop` search, tf-text detokenization): it takes a
`tf.string` tensor (N,) and returns `(translations tf.string (N,), scores float32 (N,))`,
and traces in a `tf.function` with `input_signature=[tf.TensorSpec([None], tf.string)]`
(`Translator.serving_function()` returns exactly that function), without XLA and without
Python per example.

Example:

```python
translator = Translator.from_run_dir("runs/de-en", beam_size=4, length_penalty=0.6)
translator.translate(["Ein Hund läuft im Park."])  # ["A dog runs in the park."]
translator.translate_nbest(["Ein Hund."], n=2)  # [[("A dog.", -0.21), ("One dog.", -0.93)]]
```
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.constants import TRANSLATION_DECODING_DEFAULTS
from keras_transformer.data.encoding import (
    blank_texts,
    source_limit,
    token_ids,
    translation_source,
    translation_source_ids,
)
from keras_transformer.predictors.base import DecodingPredictor, as_texts, pad_rows
from keras_transformer.validation import check_tokenizer_pad_id

logger = logging.getLogger(__name__)


class Translator(DecodingPredictor):
    """Translates text with a trained `Transformer` and its two `SubwordTokenizer`s.

    Args:
        model: the `Transformer`.
        source_tokenizer: tokenizer of the source language (`tokenize`).
        target_tokenizer: tokenizer of the target language (`detokenize`, `eos_id`).
        batch_size: sentences decoded at once.
        source_eos: end every source with the source tokenizer's EOS. None (the default):
            as the model was trained, which the model records (`Transformer.source_eos`,
            saved with it); for a model saved before it did, `from_run_dir` reads the
            run's `config.yaml` and the constructor takes `translation.source_eos`'s
            default.
        quantize: the weight type to decode in (`keras_transformer.quantization`: `int8`,
            `bfloat16`), None (the default) for the model's own.
        **decoding: the search, `decoding.BatchDecoder`'s arguments and defaults, except
            those of `constants.TRANSLATION_DECODING_DEFAULTS` (length penalty 1.0, limit
            `1.2 * source + 10`, chosen on Multi30k's validation split): `method`
            (beam search when `beam_size > 1`, else greedy), `beam_size`,
            `length_penalty` (the GNMT alpha), `max_length`, `max_length_a`,
            `max_length_b` (each sentence's limit is `min(max_length, a * source_tokens +
            b)`), `jit_compile`, `early_stopping`, `min_length`, `temperature`, `top_k`,
            `top_p`, `seed`, `length_buckets`.

    Example (not run as a doctest: it needs a trained run directory):

    ```python
    translator = Translator(model, source_tokenizer, target_tokenizer)
    translator.translate(["Zwei Hunde spielen."])
    # ['Two dogs are playing.']
    ```
    """

    task = "translation"
    progress_description = "translating"
    decoding_defaults = TRANSLATION_DECODING_DEFAULTS

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        batch_size: int = 64,
        source_eos: bool | None = None,
        quantize: str | None = None,
        **decoding: Any,
    ):
        super().__init__(model, target_tokenizer, batch_size, quantize, **decoding)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.source_eos = _source_eos(model, source_eos)
        check_tokenizer_pad_id(source_tokenizer, model)

    @classmethod
    def _from_run(cls, path: str, **kwargs: Any) -> Translator:
        """Loads the model and tokenizers of a translation run directory
        (`Translator.from_run_dir(path, **kwargs)`).

        Sources end with EOS exactly when the run was trained that way (the model's
        `source_eos`, else `run_dir.trained_with_source_eos`), unless `source_eos` is
        passed.

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        translator = Translator.from_run_dir("runs/de-en", beam_size=4)
        ```
        """
        from keras_transformer.run_dir import load_run, trained_with_source_eos

        model, source_tokenizer, target_tokenizer = load_run(path)
        if getattr(model, "source_eos", None) is None:
            kwargs.setdefault("source_eos", trained_with_source_eos(path))
        return cls(model, source_tokenizer, target_tokenizer, **kwargs)

    def encode_sources(self, sentences: Sequence[str]) -> list[np.ndarray]:
        """Source ids of each sentence (int32, EOS last with `source_eos`), truncated to the
        model's `max_length` (`data.encoding.translation_source`, as in training)."""
        if not sentences:
            return []
        tokens = token_ids(self.source_tokenizer, tf.constant(list(sentences), tf.string))
        max_length = int(self.model.max_length)
        limit = source_limit(max_length, self.source_eos)
        for i, length in enumerate(tokens.row_lengths().numpy()):
            if length > limit:
                logger.warning(
                    "Sentence %d has %d source tokens; keeping the first %d (the model's "
                    "max_length).",
                    i,
                    length,
                    limit,
                )
        ids = translation_source(
            tokens,
            max_length,
            source_eos=self.source_eos,
            eos_id=int(self.source_tokenizer.eos_id),
        )
        return [np.asarray(row, np.int32) for row in ids.to_list()]

    def decode_ids(
        self, source_ids: Sequence[np.ndarray], progress: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Decodes lists of source ids in length-sorted batches.

        Args:
            source_ids: one int array of ids per sentence (`encode_sources`).
            progress: show a progress bar.

        Returns:
            `(tokens, scores)`: per sentence, int32 (K, T) hypotheses (best first, EOS kept,
            padded) and float32 (K,) scores, in the input order.
        """
        return self._decode_rows(source_ids, progress)

    def _detokenize(self, tokens: np.ndarray) -> list[str]:
        if tokens.shape[0] == 0:
            return []
        if tokens.shape[-1] == 0:
            return [""] * tokens.shape[0]
        texts = self.target_tokenizer.detokenize(tf.constant(tokens, tf.int32)).numpy()
        return [t.decode("utf-8") for t in texts]

    def translate_nbest(
        self, sentences: Iterable[str], n: int | None = None, progress: bool = False
    ) -> list[list[tuple[str, float]]]:
        """The `n` best translations of each sentence with their scores, best first.

        Args:
            sentences: the source sentences.
            n: hypotheses per sentence, at most `beam_size` (the default).
            progress: show a progress bar.

        Returns:
            One list of `(translation, score)` per sentence; scores are length-penalized
            log-probabilities.

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        translator.translate_nbest(["Ein Hund."], n=2)
        # [[('A dog.', -0.2), ('One dog.', -0.9)]]
        ```
        """
        sentences = as_texts(sentences, "sentences")
        n = self._check_n(n)
        if not sentences:
            return []
        # A blank sentence translates to an empty one (score 0: log 1), without a search.
        blank = blank_texts(sentences).numpy().tolist()
        kept = [s for s, is_blank in zip(sentences, blank) if not is_blank]
        tokens, scores = self.decode_ids(self.encode_sources(kept), progress=progress)
        # (N * n, T): the hypotheses of every sentence, padded to the longest.
        texts = self._detokenize(pad_rows([t[:n] for t in tokens], int(self.model.pad_id)))
        decoded = iter(
            [(texts[i * n + j], float(scores[i][j])) for j in range(n)] for i in range(len(kept))
        )
        return [[("", 0.0)] * n if is_blank else next(decoded) for is_blank in blank]

    def translate(self, sentences: Iterable[str], progress: bool = False) -> list[str]:
        """Translates sentences; returns one string per input, in order (an empty one for a
        blank sentence: empty, or only whitespace, `data.encoding.blank_texts`).

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        translator.translate(["Ein Hund läuft.", "Zwei Katzen."])
        # ['A dog runs.', 'Two cats.']
        ```
        """
        return [best[0][0] for best in self.translate_nbest(sentences, n=1, progress=progress)]

    # Pure TensorFlow, for export.

    def translate_strings(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Translates a `tf.string` tensor (N,) with TensorFlow and tf-text ops only; a
        blank string (`data.encoding.blank_texts`) translates to an empty one, score 0.

        The whole batch is decoded at once, with this translator's method, beam size,
        length penalty and length limits (sampling uses seed `(seed, 0)`). Shapes may be
        dynamic; no XLA is needed. Inside `tf.function` this builds a graph that a
        SavedModel can hold (see `serving_function` and `keras_transformer.export`).

        Args:
            strings: `tf.string` (N,).

        Returns:
            `(translations, scores)`: the best translation of each string, `tf.string` (N,),
            and its score, float32 (N,).

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        fn = tf.function(translator.translate_strings,
                         input_signature=[tf.TensorSpec([None], tf.string)])
        fn(tf.constant(["Ein Hund."]))
        ```
        """
        translations, scores = self.translate_strings_nbest(strings)  # (N, K), (N, K)
        return translations[:, 0], scores[:, 0]

    def translate_strings_nbest(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Like `translate_strings`, but every hypothesis: `tf.string` (N, K), float32 (N, K).

        K is the beam size (1 for greedy search and sampling); hypotheses are best first.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        ids = translation_source_ids(
            self.source_tokenizer,
            strings,
            int(self.model.max_length),
            source_eos=self.source_eos,
        )  # (N, None)
        _, tokens, scores = self._search_graph(ids)  # (N, K, T), (N, K)
        shape = tf.shape(tokens)
        flat = tf.reshape(tokens, (shape[0] * shape[1], shape[2]))  # (N*K, T)
        translations = tf.reshape(self.target_tokenizer.detokenize(flat), shape[:2])  # (N, K)
        blank = blank_texts(strings)[:, tf.newaxis]  # (N, 1)
        translations = tf.where(blank, tf.constant("", tf.string), translations)
        return translations, tf.where(blank, tf.zeros_like(scores), scores)  # (N, K), (N, K)

    def _serve(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.translate_strings(strings)


def _source_eos(model: Any, source_eos: bool | None) -> bool:
    """Whether sources end with EOS: `source_eos` when given (a warning when the model was
    trained otherwise), else the model's record, else the training default."""
    from keras_transformer.config.task_sections import TranslationConfig

    trained = getattr(model, "source_eos", None)
    if source_eos is None:
        return TranslationConfig.source_eos if trained is None else bool(trained)
    if trained is not None and bool(trained) != bool(source_eos):
        logger.warning(
            "Encoding sources with source_eos=%s, although the model was trained with "
            "source_eos=%s: translations will be worse.",
            bool(source_eos),
            bool(trained),
        )
    return bool(source_eos)
