"""Classification: one label per text with the encoder-only model and a pooled head.

Its config section is `classification` (`config.task_sections.ClassificationConfig`).
Export:

- `serving_default`: `sentences` str (N,) -> `labels` str (N,), `probabilities` float32
  (N, C), whose columns follow `export_info.json`'s `labels`;
- `classification` (`CLASSIFY_SIGNATURE`), for TF Serving's Classify API (REST `:classify`,
  gRPC `PredictionService.Classify`): method name `tensorflow/serving/classify`, `inputs`
  str (N,) serialized `tf.Example`s, each with its text as the bytes feature `sentence`
  (`EXAMPLE_TEXT_FEATURE`) -> `classes` str (N, C) (every label, in `labels` order) and
  `scores` float32 (N, C) (their probabilities), the shapes and dtypes TF Serving's
  `classifier.cc` checks (`PostProcessClassificationResult`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.data.encoding import classification_ids, encode_in_blocks
from keras_transformer.data.examples import Component, checked_label_ids
from keras_transformer.data.task_sources import TaskData
from keras_transformer.predictors import TextClassifier
from keras_transformer.tasks.labelled import LabelledTask, source_options, task_texts
from keras_transformer.tasks.registry import register_task
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy

# The classify signature's name: the key TF Estimator's canned classifiers gave theirs
# (`classification`), next to the string-in `serving_default`.
CLASSIFY_SIGNATURE = "classification"
# The tf.Example feature that holds a text: one bytes value, the text in UTF-8; one example
# is one of `serving_default`'s `sentences`.
EXAMPLE_TEXT_FEATURE = "sentence"


def text_example(text: str | bytes) -> bytes:
    """A text as the serialized `tf.Example` the `classification` signature reads.

    Example:
        >>> example = tf.train.Example.FromString(text_example("A fine film."))
        >>> example.features.feature["sentence"].bytes_list.value
        [b'A fine film.']
    """
    value = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    features = tf.train.Features(feature={EXAMPLE_TEXT_FEATURE: feature})
    return tf.train.Example(features=features).SerializeToString()


@register_task
class ClassificationTask(LabelledTask):
    """Text classification (`data.source`: a TFDS name, or the offline
    `synthetic_sentiment`)."""

    name = "classification"
    model_name = "classifier"
    predictor_class = TextClassifier
    example_spec = (Component("text", "str", 0), Component("label", "int", 0))

    def load_data(self, split: str, *, validation: bool = False) -> TaskData:
        from keras_transformer.data.task_sources import load_classification_data

        d, s = self.config.data, self.section
        return load_classification_data(
            d.source,
            split,
            text_feature=s.text_feature,
            label_feature=s.label_feature,
            **source_options(self),
        )

    def tokenizer_texts(self, data: TaskData) -> tf.data.Dataset:
        return task_texts(data, lambda text, label: text)

    def encode(
        self,
        dataset: tf.data.Dataset,
        tokenizers: tuple[Any, Any],
        *,
        labels: tuple[str, ...] | None = None,
        origin: str = "the data",
    ) -> tf.data.Dataset:
        """`x` BOS then the text's ids (cut to `max_length`; BOS is the first-token
        pooler's summary token), `y` the label; an empty text is dropped."""
        tokenizer, length = tokenizers[0], self.section.max_length

        def encode(texts: tf.Tensor, ids: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
            if labels is not None:
                ids = checked_label_ids(ids, len(labels), origin)
            return classification_ids(tokenizer, texts, length), ids

        return encode_in_blocks(dataset, encode, min_length=2)  # more than BOS

    def num_classes(self, labels: tuple[str, ...]) -> int:
        return len(labels)

    @property
    def pooling(self) -> str | None:
        return self.section.pooling

    @classmethod
    def loss_and_metrics(cls, label_smoothing: float) -> tuple[Any, list[Any]]:
        # Averaged over the examples: a label per example, none of them padding.
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing, pad_id=None)
        return loss, [MaskedSparseCategoricalAccuracy(pad_id=None, name="accuracy")]

    @classmethod
    def serving_endpoints(cls, predictor: Any) -> dict[str, tf.types.experimental.GenericFunction]:
        function = predictor.serving_function()
        labels_in_order = tf.constant(predictor.labels, tf.string)

        @tf.function(input_signature=function.input_signature)
        def serving_default(sentences):
            labels, probabilities = function(sentences)
            return {"labels": labels, "probabilities": probabilities}

        spec = tf.TensorSpec([None], tf.string, name=tf.saved_model.CLASSIFY_INPUTS)

        @tf.function(input_signature=[spec])
        def classification(inputs):
            features = tf.io.parse_example(
                inputs, {EXAMPLE_TEXT_FEATURE: tf.io.FixedLenFeature([], tf.string)}
            )
            _, probabilities = function(features[EXAMPLE_TEXT_FEATURE])
            scores = tf.cast(probabilities, tf.float32)  # TF Serving takes DT_FLOAT scores only
            classes = tf.broadcast_to(labels_in_order, tf.shape(scores))
            return {
                tf.saved_model.CLASSIFY_OUTPUT_CLASSES: classes,
                tf.saved_model.CLASSIFY_OUTPUT_SCORES: scores,
            }

        return {"serving_default": serving_default, CLASSIFY_SIGNATURE: classification}

    @classmethod
    def signature_methods(cls) -> dict[str, str]:
        return {CLASSIFY_SIGNATURE: tf.saved_model.CLASSIFY_METHOD_NAME}

    @classmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        return {**super().export_info(predictor), "example_text_feature": EXAMPLE_TEXT_FEATURE}

    @classmethod
    def predict_lines(
        cls,
        predictor: Any,
        texts: Sequence[str],
        *,
        nbest: int | None = None,
        progress: bool = False,
    ) -> Iterator[str]:
        """`label<TAB>probability` a text a line (the most probable label)."""
        probabilities = predictor.predict_proba(texts, progress=progress)
        for row in probabilities:
            best = int(row.argmax())
            yield f"{predictor.labels[best]}\t{float(row[best]):.4f}"
