"""`Predictor`: what every predictor shares, stated once.

- text coercion (`as_texts`: a list of strings, never a bare string);
- batching in length order (`Predictor._in_length_order`: inputs sorted by length, longest
  first, so a batch pads little; results restored to the input order), with an optional
  progress bar (`progress_bar`);
- `from_run_dir`, which refuses a run of another task (`run_dir.run_task`) in one line;
- `serving_function`: the pure-TensorFlow path as a `tf.function` over
  `tf.TensorSpec([None], tf.string)`, what the exports hold.

`DecodingPredictor` adds the search (a `decoding.BatchDecoder`: `method`, `beam_size`,
`length_penalty`, n-best), for `Translator` and `TextGenerator`; `LabelPredictor` adds the
labels of an encoder-only model, for `TextClassifier` and `TextTagger`.

Example (not run as a doctest: it needs a trained run directory):

```python
Translator.from_run_dir("runs/lm")
# ValueError: Received a language_modeling run directory (runs/lm), expected a translation
# run.
```
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import tensorflow as tf

from keras_transformer import decoding as decoding_module
from keras_transformer.quantization import check_quantize, quantize_model
from keras_transformer.validation import check_positive_int, check_tokenizer_pad_id


def as_texts(texts: Iterable[str], name: str = "texts") -> list[str]:
    """Texts as a list of `str` (bytes decoded as UTF-8).

    Args:
        texts: an iterable of strings.
        name: the argument's name, for the error.

    Returns:
        The texts, in order.

    Raises:
        ValueError: on a bare string (not a list of them; a 0-d array or tensor too) or an
            item that is no string.

    Example:

    >>> as_texts([b"Ein Hund.", "Zwei."])
    ['Ein Hund.', 'Zwei.']
    """
    if isinstance(texts, (str, bytes)) or getattr(texts, "ndim", None) == 0:  # np.array("x")
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a list of strings, "
            f"not a single string. Received: {name}={texts!r:.80}"
        )
    result = []
    for i, text in enumerate(texts):
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError(
                f"Received an invalid value in `{name}`, expected strings. "
                f"Received: {type(text).__name__} at index {i}"
            )
        result.append(text)
    return result


def pad_rows(rows: Sequence[np.ndarray], pad_id: int) -> np.ndarray:
    """Stacks int arrays `(T_i,)` or `(k_i, T_i)` into `(sum k_i, max(1, max T_i))`.

    Example:

    >>> pad_rows([np.array([5, 6]), np.array([7])], 0).tolist()
    [[5, 6], [7, 0]]
    """
    rows = [np.atleast_2d(np.asarray(r, np.int32)) for r in rows]
    width = max([1] + [r.shape[-1] for r in rows])
    out = np.full((sum(r.shape[0] for r in rows), width), pad_id, np.int32)
    start = 0
    for r in rows:
        out[start : start + r.shape[0], : r.shape[-1]] = r
        start += r.shape[0]
    return out


def progress_bar(total: int, enabled: bool = True, description: str = "predicting"):
    """A progress bar with `update(n)` and `close()`: tqdm if installed, else Keras's.

    Returns a no-op bar when `enabled` is False.
    """
    if not enabled:
        return _NoProgress()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _KerasProgress(total)
    return tqdm(total=total, desc=description, unit="text")


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _KerasProgress:
    def __init__(self, total: int) -> None:
        import keras

        self._bar = keras.utils.Progbar(total, unit_name="text")
        self._seen = 0

    def update(self, n: int = 1) -> None:
        self._seen += n
        self._bar.update(self._seen)

    def close(self) -> None:
        pass


def check_run_task(path: str, task: str) -> None:
    """Refuses a run directory trained for another task than `task`, in one line."""
    from keras_transformer.run_dir import run_task

    found = run_task(path)
    if found != task:
        raise ValueError(f"Received a {found} run directory ({path}), expected a {task} run.")


# A predictor class's own type (`from_run_dir` returns an instance of the class it is called on).
P = TypeVar("P", bound="Predictor")


class Predictor:
    """Texts in, predictions out, with a trained model: the part every task shares.

    A subclass states its task once (`task`, as in `config.yaml`), loads a run in
    `_from_run` and gives its pure-TensorFlow path in `_serve`.

    Args:
        model: the trained model.
        batch_size: texts per model call.
        quantize: predict with a copy of `model` in a smaller weight type,
            `constants.QUANTIZATIONS` (`keras_transformer.quantization`: `int8`, `bfloat16`);
            None (the default) predicts with `model` itself.
    """

    task: ClassVar[str]
    # The name of the serving function's input (and of the exports' input tensor).
    serving_input: ClassVar[str] = "sentences"
    progress_description: ClassVar[str] = "predicting"

    def __init__(self, model: Any, batch_size: int = 64, quantize: str | None = None):
        self.quantize = check_quantize(quantize)
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.model = quantize_model(model, self.quantize)

    @classmethod
    def from_run_dir(cls: type[P], path: str, **kwargs: Any) -> P:
        """Loads a run directory (`keras_transformer.run_dir`) of this predictor's task.

        Args:
            path: the run directory.
            **kwargs: the predictor's arguments.

        Raises:
            ValueError: when the run was trained for another task.
        """
        check_run_task(path, cls.task)
        return cls._from_run(path, **kwargs)

    @classmethod
    def _from_run(cls, path: str, **kwargs: Any):
        raise NotImplementedError

    def _serve(self, strings: tf.Tensor) -> Any:
        raise NotImplementedError

    def serving_function(self) -> tf.types.experimental.PolymorphicFunction:
        """The pure-TensorFlow path as a `tf.function` over `tf.TensorSpec([None],
        tf.string)`."""
        return tf.function(
            self._serve,
            input_signature=[tf.TensorSpec([None], tf.string, name=self.serving_input)],
        )

    def _in_length_order(
        self,
        lengths: Sequence[int],
        run: Callable[[list[int]], Sequence[Any]],
        progress: bool = False,
    ) -> list[Any]:
        """Runs `run(indices)` on batches of `batch_size` inputs taken longest first.

        Args:
            lengths: each input's length.
            run: the results of the inputs at `indices`, in that order.
            progress: show a progress bar.

        Returns:
            The results, in the input order.
        """
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        results: list[Any] = [None] * len(lengths)
        bar = progress_bar(len(lengths), enabled=progress, description=self.progress_description)
        try:
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                for i, result in zip(chunk, run(chunk)):
                    results[i] = result
                bar.update(len(chunk))
        finally:
            bar.close()
        return results


class DecodingPredictor(Predictor):
    """A predictor that searches outputs with a `decoding.BatchDecoder`.

    Args:
        model: a model with the decoding interface (`Transformer`,
            `TransformerDecoderModel`).
        tokenizer: the output's tokenizer (its `bos_id`, `eos_id`).
        batch_size: inputs decoded at once.
        quantize: the weight type to decode in (`Predictor`), None for the model's own.
        **decoding: `decoding.BatchDecoder`'s arguments; those left out keep the
            subclass's `decoding_defaults`, else `BatchDecoder`'s.
    """

    # `BatchDecoder` arguments whose defaults the predictor changes, and those it sets
    # itself and refuses (read by the commands' help and checks too).
    decoding_defaults: ClassVar[Mapping[str, Any]] = {}
    fixed_decoding: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int = 64,
        quantize: str | None = None,
        **decoding: Any,
    ):
        super().__init__(model, batch_size, quantize)
        self.decoder = decoding_module.BatchDecoder(
            self.model,
            bos_id=int(tokenizer.bos_id),
            eos_id=int(tokenizer.eos_id),
            **{**self.decoding_defaults, **decoding},
        )

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

    def _check_n(self, n: int | None) -> int:
        """`n` hypotheses per input, at most (and by default) the decoder's."""
        available = self.decoder.num_hypotheses
        n = available if n is None else check_positive_int("n", n)
        if n > available:
            raise ValueError(
                f"Received an invalid value for argument `n`, expected at most {available} "
                f"(the hypotheses this {type(self).__name__} keeps). Received: n={n}"
            )
        return n

    def _decode_rows(
        self, rows: Sequence[np.ndarray], progress: bool = False
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Decodes lists of ids in length-sorted batches.

        Returns:
            `(tokens, scores)`: per row, int32 (K, T) hypotheses (best first, EOS kept,
            padded) and float32 (K,) scores, in the input order.
        """
        pad_id = int(self.model.pad_id)

        def run(chunk: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
            output = self.decoder(pad_rows([rows[i] for i in chunk], pad_id))  # (b, K, T)
            return list(zip(output.tokens, output.scores))

        results = self._in_length_order([len(r) for r in rows], run, progress)
        return [t for t, _ in results], [s for _, s in results]

    def _search_graph(self, ids: tf.RaggedTensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The whole batch's search as graph ops (export): ragged ids (N, None) in.

        Each row's limit is the decoder's `min(max_length, a * length + b)`; the search runs
        for the longest limit (at least one step, also for an empty batch); sampling uses
        the seed `(seed, 0)`.

        Returns:
            `(ids (N, S), tokens (N, K, T), scores (N, K))`: the padded input ids (at least
            one column) and the search's outputs.
        """
        decoder, pad_id = self.decoder, int(self.model.pad_id)
        dense = tf.cast(ids.to_tensor(default_value=tf.constant(pad_id, ids.dtype)), tf.int32)
        width = tf.shape(dense)[1]
        dense = tf.pad(dense, [[0, 0], [0, tf.maximum(1 - width, 0)]], constant_values=pad_id)
        max_lengths = decoding_module.max_decode_lengths(
            dense, pad_id, decoder.max_length, decoder.max_length_a, decoder.max_length_b
        )  # (N,)
        num_steps = tf.reduce_max(tf.concat([max_lengths, [1]], 0))
        seed = tf.constant([decoder.seed, 0], tf.int64)
        tokens, scores = decoder.search(dense, max_lengths, num_steps, seed)
        return dense, tokens, scores


class LabelPredictor(Predictor):
    """A predictor of labels with an encoder-only model (`TransformerEncoderModel`).

    Args:
        model: the trained model; pooled (a sequence head) exactly when `pooled`.
        tokenizer: its `SubwordTokenizer`.
        labels: the label names, in id order (`labels.txt` of the run).
        batch_size: texts per model call.
        quantize: the weight type to predict in (`Predictor`), None for the model's own.
    """

    pooled: ClassVar[bool]

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        labels: Sequence[str],
        batch_size: int = 64,
        quantize: str | None = None,
    ):
        super().__init__(model, batch_size, quantize)
        self.tokenizer = tokenizer
        self.labels = tuple(labels)
        if (model.pooling is not None) != self.pooled:
            raise ValueError(
                f"Received a model with pooling={model.pooling!r}, expected "
                f"{'a pooled (sequence) head' if self.pooled else 'a per-token head'} for "
                f"{type(self).__name__}."
            )
        expected = len(self.labels) + (0 if self.pooled else 1)
        if model.num_classes != expected:
            raise ValueError(
                f"Received {len(self.labels)} labels for a model with "
                f"num_classes={model.num_classes}, expected {expected} labels' worth."
            )
        check_tokenizer_pad_id(tokenizer, model)
        self._label_table = tf.constant(self.labels, tf.string)
        self._function = None

    @classmethod
    def _from_run(cls, path: str, **kwargs: Any):
        from keras_transformer.run_dir import load_run, read_labels

        model, tokenizer, _ = load_run(path)
        return cls(model, tokenizer, read_labels(path), **kwargs)

    def _serve_batches(self, texts: list[str], progress: bool = False) -> list[Any]:
        """Each text's outputs of the serving function (a tuple of arrays, one row each),
        batched longest first by token count."""
        if self._function is None:
            self._function = self.serving_function()
        if not texts:
            return []
        lengths = self.tokenizer.tokenize(tf.constant(texts, tf.string)).row_lengths().numpy()

        def run(chunk: list[int]) -> list[tuple[np.ndarray, ...]]:
            outputs = self._function(tf.constant([texts[i] for i in chunk], tf.string))
            arrays = [o.numpy() for o in outputs]
            return [tuple(a[row] for a in arrays) for row in range(len(chunk))]

        return self._in_length_order(list(lengths), run, progress)
