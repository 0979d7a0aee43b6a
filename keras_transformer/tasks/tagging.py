"""Tagging: one tag per word (part of speech, named entities) with the encoder-only model and
a per-token head; each word's tag is read at its first piece.

Its config section is `tagging` (`config.task_sections.TaggingConfig`). Export:
`serving_default`: `sentences` str (N,) -> `words` str (N, W), `tags` str (N, W) (padded
with `""`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.constants import NO_TAG_ID
from keras_transformer.data.encoding import encode_in_blocks, tagging_labels
from keras_transformer.data.examples import Component, checked_label_ids
from keras_transformer.data.task_sources import TaskData
from keras_transformer.predictors import TextTagger
from keras_transformer.tasks.labelled import LabelledTask, source_options, task_texts
from keras_transformer.tasks.registry import register_task
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy


@register_task
class TaggingTask(LabelledTask):
    """Tagging of words (`data.source`: a TFDS name, or the offline `synthetic_pos`)."""

    name = "tagging"
    model_name = "tagger"
    predictor_class = TextTagger
    example_spec = (Component("words", "str", 1), Component("tags", "int", 1))

    def load_data(self, split: str, *, validation: bool = False) -> TaskData:
        from keras_transformer.data.task_sources import load_tagging_data

        d, s = self.config.data, self.section
        return load_tagging_data(
            d.source,
            split,
            words_feature=s.words_feature,
            tags_feature=s.tags_feature,
            **source_options(self),
        )

    def tokenizer_texts(self, data: TaskData) -> tf.data.Dataset:
        return task_texts(data, lambda words, tags: tf.strings.reduce_join(words, separator=" "))

    def encode(
        self,
        dataset: tf.data.Dataset,
        tokenizers: tuple[Any, Any],
        *,
        labels: tuple[str, ...] | None = None,
        origin: str = "the data",
    ) -> tf.data.Dataset:
        """`x` the sentence's subword ids, `y` a word's tag k as id k + 1 on its first piece
        and `NO_TAG_ID` on its other pieces (each word scored once); cut to `max_length`.
        A sentence of another number of tags than words raises
        `tf.errors.InvalidArgumentError` (`data.encoding.tagging_labels`)."""
        tokenizer, length = tokenizers[0], self.section.max_length

        def encode(words: tf.RaggedTensor, tags: tf.RaggedTensor) -> Any:
            if labels is not None:
                tags = tags.with_flat_values(
                    checked_label_ids(tags.flat_values, len(labels), origin, "tag")
                )
            return tagging_labels(tokenizer, words, tags, length, origin=origin)

        return encode_in_blocks(dataset, encode, ragged=True)

    def num_classes(self, labels: tuple[str, ...]) -> int:
        return len(labels) + 1  # and NO_TAG_ID

    @classmethod
    def loss_and_metrics(cls, label_smoothing: float) -> tuple[Any, list[Any]]:
        loss = MaskedSparseCategoricalCrossentropy(
            label_smoothing=label_smoothing, pad_id=NO_TAG_ID
        )
        return loss, [MaskedSparseCategoricalAccuracy(pad_id=NO_TAG_ID, name="accuracy")]

    @classmethod
    def serving_endpoints(cls, predictor: Any) -> dict[str, tf.types.experimental.GenericFunction]:
        function = predictor.serving_function()

        @tf.function(input_signature=function.input_signature)
        def serving_default(sentences):
            words, tags = function(sentences)
            return {"words": words, "tags": tags}

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
        """`word/TAG` pairs, space-separated, a sentence a line."""
        for pairs in predictor.tag(texts, progress=progress):
            yield " ".join(f"{word}/{tag}" for word, tag in pairs)
