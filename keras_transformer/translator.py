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

from keras_transformer import decoding as decoding_module
from keras_transformer.constants import TRANSLATION_DECODING_DEFAULTS
from keras_transformer.tokenization import append_eos
from keras_transformer.validation import check_positive_int, check_tokenizer_pad_id

logger = logging.getLogger(__name__)


def progress_bar(total: int, enabled: bool = True, description: str = "translating"):
    """A progress bar with `update(n)` and `close()`: tqdm if installed, else Keras's.

    Returns a no-op bar when `enabled` is False.
    """
    if not enabled:
        return _NoProgress()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _KerasProgress(total)
    return tqdm(total=total, desc=description, unit="sent")


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _KerasProgress:
    def __init__(self, total: int) -> None:
        import keras

        self._bar = keras.utils.Progbar(total, unit_name="sentence")
        self._seen = 0

    def update(self, n: int = 1) -> None:
        self._seen += n
        self._bar.update(self._seen)

    def close(self) -> None:
        pass


class Translator:
    """Translates text with a trained `Transformer` and its two `SubwordTokenizer`s.

    Args:
        model: the `Transformer`.
        source_tokenizer: tokenizer of the source language (`tokenize`).
        target_tokenizer: tokenizer of the target language (`detokenize`, `eos_id`).
        batch_size: sentences decoded at once.
        source_eos: end every source with the source tokenizer's EOS, as the model was
            trained (`data.source_eos`; `from_run_dir` reads it from the run).
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

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        batch_size: int = 64,
        source_eos: bool = True,
        **decoding: Any,
    ):
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.source_eos = bool(source_eos)
        self.decoder = decoding_module.BatchDecoder(
            model,
            bos_id=int(target_tokenizer.bos_id),
            eos_id=int(target_tokenizer.eos_id),
            **{**TRANSLATION_DECODING_DEFAULTS, **decoding},
        )
        check_tokenizer_pad_id(source_tokenizer, model)

    @classmethod
    def from_run_dir(cls, path: str, **kwargs: Any) -> Translator:
        """Loads the model and tokenizers of a run directory (`keras_transformer.run_dir`).

        Sources end with EOS exactly when the run was trained that way
        (`run_dir.trained_with_source_eos`), unless `source_eos` is passed.

        Args:
            path: the run directory.
            **kwargs: `Translator` arguments.

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        translator = Translator.from_run_dir("runs/de-en", beam_size=4)
        ```
        """
        from keras_transformer.run_dir import load_run, trained_with_source_eos

        model, source_tokenizer, target_tokenizer = load_run(path)
        kwargs.setdefault("source_eos", trained_with_source_eos(path))
        return cls(model, source_tokenizer, target_tokenizer, **kwargs)

    # Settings, read by commands and exports.

    @property
    def method(self) -> str:
        return self.decoder.method

    @property
    def beam_size(self) -> int:
        return self.decoder.beam_size

    @property
    def length_penalty(self) -> float:
        return self.decoder.length_penalty

    def _source_ids(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Tokenized sources (N, None), cut to the model's `max_length` (EOS included)."""
        return self._cut_sources(self.source_tokenizer.tokenize(strings))

    def _cut_sources(self, ragged: tf.RaggedTensor) -> tf.RaggedTensor:
        limit = int(self.model.max_length)
        if not self.source_eos:
            return ragged[:, :limit]
        return append_eos(ragged[:, : limit - 1], int(self.source_tokenizer.eos_id))

    def encode_sources(self, sentences: Sequence[str]) -> list[np.ndarray]:
        """Source ids of each sentence (int32, EOS last with `source_eos`), truncated to the
        model's `max_length`."""
        if not sentences:
            return []
        ragged = self.source_tokenizer.tokenize(tf.constant(list(sentences), tf.string))
        limit = int(self.model.max_length) - int(self.source_eos)
        for i, length in enumerate(ragged.row_lengths().numpy()):
            if length > limit:
                logger.warning(
                    "Sentence %d has %d source tokens; keeping the first %d (the model's "
                    "max_length).",
                    i,
                    length,
                    limit,
                )
        return [np.asarray(row, np.int32) for row in self._cut_sources(ragged).to_list()]

    def decode_ids(
        self, source_ids: Sequence[np.ndarray], progress: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Decodes lists of source ids in length-sorted batches.

        Args:
            source_ids: one int array of ids per sentence (no BOS/EOS).
            progress: show a progress bar.

        Returns:
            `(tokens, scores)`: per sentence, int32 (K, T) hypotheses (best first, EOS kept,
            padded) and float32 (K,) scores, in the input order.
        """
        order = sorted(range(len(source_ids)), key=lambda i: -len(source_ids[i]))
        tokens: list[Any] = [None] * len(source_ids)
        scores: list[Any] = [None] * len(source_ids)
        bar = progress_bar(len(source_ids), enabled=progress)
        pad_id = int(self.model.pad_id)
        try:
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                width = max(1, max(len(source_ids[i]) for i in chunk))
                batch = np.full((len(chunk), width), pad_id, np.int32)
                for row, i in enumerate(chunk):
                    batch[row, : len(source_ids[i])] = source_ids[i]
                output = self.decoder(batch)  # (b, K, T), (b, K)
                for row, i in enumerate(chunk):
                    tokens[i] = output.tokens[row]
                    scores[i] = output.scores[row]
                bar.update(len(chunk))
        finally:
            bar.close()
        return tokens, scores

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
        sentences = _as_sentences(sentences)
        available = self.decoder.num_hypotheses
        n = available if n is None else check_positive_int("n", n)
        if n > available:
            raise ValueError(
                f"Received an invalid value for argument `n`, expected at most "
                f"{available} (the hypotheses this translator keeps). Received: n={n}"
            )
        tokens, scores = self.decode_ids(self.encode_sources(sentences), progress=progress)
        if not sentences:
            return []
        # (N * n, T): the hypotheses of every sentence, padded to the longest.
        texts = self._detokenize(_pad_rows([t[:n] for t in tokens], int(self.model.pad_id)))
        return [
            [(texts[i * n + j], float(scores[i][j])) for j in range(n)]
            for i in range(len(sentences))
        ]

    def translate(self, sentences: Iterable[str], progress: bool = False) -> list[str]:
        """Translates sentences; returns one string per input, in order.

        Example (not run as a doctest: it needs a trained run directory):

        ```python
        translator.translate(["Ein Hund läuft.", "Zwei Katzen."])
        # ['A dog runs.', 'Two cats.']
        ```
        """
        return [best[0][0] for best in self.translate_nbest(sentences, n=1, progress=progress)]

    # Pure TensorFlow, for export.

    def translate_strings(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Translates a `tf.string` tensor (N,) with TensorFlow and tf-text ops only.

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
        decoder = self.decoder
        strings = tf.convert_to_tensor(strings, tf.string)
        ragged = self._source_ids(strings)  # (N, None)
        pad_id = int(self.model.pad_id)
        source_ids = ragged.to_tensor(default_value=tf.constant(pad_id, ragged.dtype))
        source_ids = tf.cast(source_ids, tf.int32)
        # At least one column, so the encoder sees a non-empty sequence.
        width = tf.shape(source_ids)[1]
        source_ids = tf.pad(
            source_ids, [[0, 0], [0, tf.maximum(1 - width, 0)]], constant_values=pad_id
        )  # (N, S)
        max_lengths = decoding_module.max_decode_lengths(
            source_ids, pad_id, decoder.max_length, decoder.max_length_a, decoder.max_length_b
        )  # (N,)
        num_steps = tf.maximum(tf.reduce_max(tf.concat([max_lengths, [1]], 0)), 1)
        seed = tf.constant([decoder.seed, 0], tf.int64)
        tokens, scores = decoder.search(source_ids, max_lengths, num_steps, seed)  # (N, K, T)
        shape = tf.shape(tokens)
        flat = tf.reshape(tokens, (shape[0] * shape[1], shape[2]))  # (N*K, T)
        translations = self.target_tokenizer.detokenize(flat)  # (N*K,)
        return tf.reshape(translations, shape[:2]), scores  # (N, K), (N, K)

    def serving_function(self) -> tf.types.experimental.PolymorphicFunction:
        """`translate_strings` as a `tf.function` over `tf.TensorSpec([None], tf.string)`."""
        return tf.function(
            self.translate_strings,
            input_signature=[tf.TensorSpec([None], tf.string, name="sentences")],
        )


def _as_sentences(sentences: Iterable[str]) -> list[str]:
    if isinstance(sentences, (str, bytes)):
        raise ValueError(
            "Received an invalid value for argument `sentences`, expected a list of strings, "
            f"not a single string. Received: sentences={sentences!r:.80}"
        )
    result = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, bytes):
            sentence = sentence.decode("utf-8")
        if not isinstance(sentence, str):
            raise ValueError(
                "Received an invalid value in `sentences`, expected strings. "
                f"Received: {type(sentence).__name__} at index {i}"
            )
        result.append(sentence)
    return result


def _pad_rows(arrays: list[np.ndarray], pad_id: int) -> np.ndarray:
    """Stacks (k, T_i) arrays into (sum k, max T_i)."""
    width = max(a.shape[-1] for a in arrays)
    rows = sum(a.shape[0] for a in arrays)
    out = np.full((rows, width), pad_id, np.int32)
    r = 0
    for a in arrays:
        out[r : r + a.shape[0], : a.shape[-1]] = a
        r += a.shape[0]
    return out
