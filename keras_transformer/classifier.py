"""`TextClassifier` and `TextTagger`: texts in, labels out, with a trained encoder-only model.

Both encode text as their training data was (`data.task_pipeline`) and have a pure
TensorFlow path for export (`classify_strings`, `tag_strings`: tf-text tokenization, the
model, string labels; no Python per example, no XLA).

Example (not run as a doctest: it needs trained run directories):

```python
classifier = TextClassifier.from_run_dir("runs/sentiment")
classifier.classify(["A wonderful film."])  # ["positive"]
classifier.predict_proba(["A wonderful film."])  # array([[0.02, 0.98]], dtype=float32)
tagger = TextTagger.from_run_dir("runs/pos")
tagger.tag(["they watch the film ."])  # [[("they", "PRON"), ("watch", "VERB"), ...]]
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.constants import NO_TAG_ID
from keras_transformer.data.encoding import classification_ids, tagging_ids
from keras_transformer.validation import check_positive_int, check_tokenizer_pad_id


def _as_texts(texts: Iterable[str]) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            "Received an invalid value for argument `texts`, expected a list of strings, not "
            f"a single string. Received: texts={texts!r:.80}"
        )
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]


class _EncoderTask:
    """What the classifier and the tagger share: model, tokenizer, labels, batching."""

    pooled: bool

    def __init__(self, model, tokenizer, labels: Sequence[str], batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.labels = tuple(labels)
        self.batch_size = check_positive_int("batch_size", batch_size)
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
    def from_run_dir(cls, path: str, **kwargs: Any):
        """Loads the model, tokenizer and labels of a run directory."""
        from keras_transformer.run_dir import load_run
        from keras_transformer.tasks.data import read_labels

        model, tokenizer, _ = load_run(path)
        return cls(model, tokenizer, read_labels(path), **kwargs)

    def serving_function(self) -> tf.types.experimental.PolymorphicFunction:
        """The pure-TF path as a `tf.function` over `tf.TensorSpec([None], tf.string)`."""
        return tf.function(
            self._strings_function,
            input_signature=[tf.TensorSpec([None], tf.string, name="sentences")],
        )

    def _batched(self, texts: list[str]) -> list[Any]:
        if self._function is None:
            self._function = self.serving_function()
        return [
            self._function(tf.constant(texts[i : i + self.batch_size], tf.string))
            for i in range(0, len(texts), self.batch_size)
        ]


class TextClassifier(_EncoderTask):
    """Labels texts with a `TransformerEncoderModel` with a pooled head and its tokenizer.

    Args:
        model: the trained model (`pooling` `"mean"` or `"first"`).
        tokenizer: its `SubwordTokenizer`.
        labels: the label names, in id order (`labels.txt` of the run).
        batch_size: texts per model call.
    """

    pooled = True

    def classify_strings(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Classifies a `tf.string` tensor (N,) with TensorFlow and tf-text ops only.

        Returns:
            `(labels, probabilities)`: the most likely label of each text, `tf.string`
            (N,), and every label's probability, float32 (N, C) in `labels` order.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        ids = classification_ids(self.tokenizer, strings, int(self.model.max_length))
        ids = ids.to_tensor(default_value=int(self.model.pad_id))  # (N, T)
        probabilities = tf.nn.softmax(self.model(ids, training=False), axis=-1)  # (N, C)
        best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return tf.gather(self._label_table, best), probabilities

    _strings_function = classify_strings

    def predict_proba(self, texts: Iterable[str]) -> np.ndarray:
        """The probability of each label for each text: float32 (N, C)."""
        texts = _as_texts(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), np.float32)
        return np.concatenate([p.numpy() for _, p in self._batched(texts)])

    def classify(self, texts: Iterable[str]) -> list[str]:
        """The most likely label of each text."""
        return [self.labels[i] for i in self.predict_proba(texts).argmax(-1)]


class TextTagger(_EncoderTask):
    """Tags the words of texts with a `TransformerEncoderModel` with a per-token head.

    Words are the text's whitespace-separated parts (as the tagging data's words were
    joined); each word's tag is read at its first subword piece. A word past the model's
    `max_length` pieces, or one that tokenizes to nothing, gets the tag `""`.

    Args:
        model: the trained model (`pooling=None`).
        tokenizer: its `SubwordTokenizer`.
        labels: the tag names, in id order (`labels.txt` of the run).
        batch_size: texts per model call.
    """

    pooled = False

    def tag_strings(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Tags a `tf.string` tensor (N,) with TensorFlow and tf-text ops only.

        Returns:
            `(words, tags)`: `tf.string` (N, W), padded with `""`.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        words = tf.strings.split(strings)  # (N, W)
        max_length = int(self.model.max_length)
        ids, _, counts = tagging_ids(self.tokenizer, words, max_length)
        dense = ids.to_tensor(default_value=int(self.model.pad_id))  # (N, T)
        dense = tf.pad(dense, [[0, 0], [0, tf.maximum(1 - tf.shape(dense)[1], 0)]])
        logits = self.model(dense, training=False)  # (N, T, 1 + tags)
        predicted = tf.argmax(logits[:, :, NO_TAG_ID + 1 :], axis=-1, output_type=tf.int32)
        # Each word's first piece sits after the pieces of the words before it in its text.
        flat_counts = tf.cast(counts.flat_values, tf.int32)  # (words,)
        totals = tf.concat([[0], tf.math.cumsum(flat_counts)], axis=0)  # (words + 1,)
        row_starts = tf.gather(totals, counts.row_splits[:-1])  # (N,)
        starts = totals[:-1] - tf.repeat(row_starts, counts.row_lengths())  # (words,)
        valid = tf.logical_and(flat_counts > 0, starts < max_length)
        width = tf.shape(dense)[1]
        rows = tf.cast(counts.value_rowids(), tf.int32)
        at = rows * width + tf.minimum(starts, width - 1)
        tags = tf.gather(tf.reshape(predicted, [-1]), at)  # (words,)
        names = tf.where(valid, tf.gather(self._label_table, tags), "")
        return words.to_tensor(""), words.with_flat_values(names).to_tensor("")

    _strings_function = tag_strings

    def tag(self, texts: Iterable[str]) -> list[list[tuple[str, str]]]:
        """`(word, tag)` pairs of each text."""
        texts = _as_texts(texts)
        result: list[list[tuple[str, str]]] = []
        for (words, tags), chunk_start in zip(
            self._batched(texts), range(0, len(texts), self.batch_size)
        ):
            for row, text in enumerate(texts[chunk_start : chunk_start + self.batch_size]):
                count = len(text.split())
                result.append(
                    [
                        (w.decode("utf-8"), t.decode("utf-8"))
                        for w, t in zip(words[row].numpy()[:count], tags[row].numpy()[:count])
                    ]
                )
        return result
