"""`TextTagger`: texts in, a tag per word out, with a trained encoder-only model.

It encodes text as its training data was (`data.encoding.text_words`, `tagging_ids`), and
`tag_strings` is the pure TensorFlow path for export (tf-text tokenization, the model,
string tags; no Python per example, no XLA).

Example (not run as a doctest: it needs a trained run directory):

```python
tagger = TextTagger.from_run_dir("runs/pos")
tagger.tag(["they watch the film ."])  # [[("they", "PRON"), ("watch", "VERB"), ...]]
```
"""

from __future__ import annotations

from collections.abc import Iterable

import tensorflow as tf

from keras_transformer.constants import NO_TAG_ID
from keras_transformer.data.encoding import tagging_ids, text_words
from keras_transformer.predictors.base import LabelPredictor, as_texts


class TextTagger(LabelPredictor):
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

    task = "tagging"
    pooled = False
    progress_description = "tagging"

    def tag_strings(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Tags a `tf.string` tensor (N,) with TensorFlow and tf-text ops only.

        Returns:
            `(words, tags)`: `tf.string` (N, W), padded with `""`.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        words = text_words(strings)  # (N, W)
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

    def _serve(self, strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.tag_strings(strings)

    def tag(self, texts: Iterable[str], progress: bool = False) -> list[list[tuple[str, str]]]:
        """`(word, tag)` pairs of each text."""
        texts = as_texts(texts)
        result = []
        for words, tags in self._serve_batches(texts, progress):
            # The row is padded with "" to its batch's most words; a word is never empty
            # (`text_words` splits at ASCII whitespace only, where `str.split` also splits at
            # a no-break space).
            pairs = [(w, t) for w, t in zip(words, tags) if w]
            result.append([(w.decode("utf-8"), t.decode("utf-8")) for w, t in pairs])
        return result
