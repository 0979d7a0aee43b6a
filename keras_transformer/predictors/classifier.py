"""`TextClassifier`: texts in, labels out, with a trained encoder-only model.

It encodes text as its training data was (`data.encoding.classification_ids`), and
`classify_strings` is the pure TensorFlow path for export (tf-text tokenization, the model,
string labels; no Python per example, no XLA).

Example (not run as a doctest: it needs a trained run directory):

```python
classifier = TextClassifier.from_run_dir("runs/sentiment")
classifier.classify(["A wonderful film."])  # ["positive"]
classifier.predict_proba(["A wonderful film."])  # array([[0.02, 0.98]], dtype=float32)
```
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import tensorflow as tf

from keras_transformer.data.encoding import classification_ids
from keras_transformer.predictors.base import LabelPredictor, as_texts


class TextClassifier(LabelPredictor):
    """Labels texts with a `TransformerEncoderModel` with a pooled head and its tokenizer.

    Args:
        model: the trained model (`pooling` `"mean"` or `"first"`).
        tokenizer: its `SubwordTokenizer`.
        labels: the label names, in id order (`labels.txt` of the run).
        batch_size: texts per model call.
    """

    task = "classification"
    pooled = True
    progress_description = "classifying"

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

    def _serve(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.classify_strings(strings)

    def predict_proba(self, texts: Iterable[str], progress: bool = False) -> np.ndarray:
        """The probability of each label for each text: float32 (N, C)."""
        rows = self._serve_batches(as_texts(texts), progress)
        if not rows:
            return np.zeros((0, len(self.labels)), np.float32)
        return np.stack([probabilities for _, probabilities in rows])

    def classify(self, texts: Iterable[str], progress: bool = False) -> list[str]:
        """The most likely label of each text."""
        return [self.labels[i] for i in self.predict_proba(texts, progress).argmax(-1)]
