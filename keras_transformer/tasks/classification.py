"""Classification: one label per text with the encoder-only model and a pooled head.

Its config section is `classification` (`config.task_sections.ClassificationConfig`).
Export: `serving_default`: `sentences` str (N,) -> `labels` str (N,), `probabilities`
float32 (N, C), whose columns follow `export_info.json`'s `labels`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.data.encoding import classification_ids, encode_in_blocks
from keras_transformer.data.task_sources import TaskData
from keras_transformer.predictors import TextClassifier
from keras_transformer.tasks.labelled import LabelledTask, source_options, task_texts
from keras_transformer.tasks.registry import register_task
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy


@register_task
class ClassificationTask(LabelledTask):
    """Text classification (`data.source`: a TFDS name, or the offline
    `synthetic_sentiment`)."""

    name = "classification"
    model_name = "classifier"
    predictor_class = TextClassifier

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

    def encode(self, dataset: tf.data.Dataset, tokenizers: tuple[Any, Any]) -> tf.data.Dataset:
        """`x` BOS then the text's ids (cut to `max_length`; BOS is the first-token
        pooler's summary token), `y` the label; an empty text is dropped."""
        tokenizer, length = tokenizers[0], self.section.max_length
        return encode_in_blocks(
            dataset,
            lambda texts, labels: (classification_ids(tokenizer, texts, length), labels),
            min_length=2,  # more than BOS
        )

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

        @tf.function(input_signature=function.input_signature)
        def serving_default(sentences):
            labels, probabilities = function(sentences)
            return {"labels": labels, "probabilities": probabilities}

        return {"serving_default": serving_default}

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
