"""Language modelling: a causal decoder-only model over documents, cut into windows; its
predictor continues prompts with the cached searches.

Its config section is `language_modeling` (`config.task_sections.LanguageModelingConfig`).
Export: `serving_default`: `prompts` str (N,) -> `continuations` str (N,), `texts` str (N,)
(prompt and continuation), `scores` float32 (N,); `generate_nbest`: the same, (N, K). The
decoding settings are baked in and recorded in `export_info.json`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.constants import PAD_ID
from keras_transformer.data.encoding import (
    blank_texts,
    encode_in_blocks,
    language_model_windows,
)
from keras_transformer.data.examples import Component
from keras_transformer.data.task_sources import TaskData
from keras_transformer.predictors import TextGenerator
from keras_transformer.tasks.base import Task
from keras_transformer.tasks.labelled import model_arguments, model_info, source_options
from keras_transformer.tasks.registry import register_task
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedPerplexity, MaskedSparseCategoricalAccuracy
from keras_transformer.training.models import TrainingDecoderModel, build_training_model


@register_task
class LanguageModelingTask(Task):
    """A causal language model (`data.source`: a TFDS name, or the offline
    `synthetic_text`)."""

    name = "language_modeling"
    model_name = "generator"
    predictor_class = TextGenerator
    main_metric = "perplexity"
    decodes = True
    hard_vocab_limit = False
    example_spec = (Component("text", "str", 0),)

    def load_data(self, split: str, *, validation: bool = False) -> TaskData:
        from keras_transformer.data.task_sources import load_language_modeling_data

        d, s = self.config.data, self.section
        return load_language_modeling_data(
            d.source,
            split,
            text_feature=s.text_feature,
            document_separator=s.document_separator,
            **source_options(self),
        )

    def tokenizer_texts(self, data: TaskData) -> tf.data.Dataset:
        return data.dataset.map(lambda text: (text, ""))

    def encode(
        self,
        dataset: tf.data.Dataset,
        tokenizers: tuple[Any, Any],
        *,
        labels: tuple[str, ...] | None = None,
        origin: str = "the data",
    ) -> tf.data.Dataset:
        """`x` `[BOS] + tokens`, `y` `tokens + [EOS]`; a document longer than `max_length`
        is cut into consecutive windows of `max_length` positions (a window after the first
        starts with the token before it, not BOS). A blank document is dropped (it would
        teach EOS right after BOS), as the other tasks drop an empty text."""
        tokenizer, length = tokenizers[0], self.section.max_length
        documents = dataset.filter(lambda text: tf.logical_not(blank_texts(text)))
        return encode_in_blocks(
            documents, lambda texts: language_model_windows(tokenizer, texts, length)
        )

    def build_model(
        self,
        tokenizers: tuple[Any, Any],
        labels: tuple[str, ...] | None,
        *,
        remat: bool | None = None,
        dtype_policy: str | None = None,
    ) -> keras.Model:
        m = self.config.model
        arguments = model_arguments(self.config, tokenizers[0].vocab_size, dtype_policy)
        arguments.update(
            num_layers=m.num_decoder_layers, tie_output_embeddings=m.tie_output_embeddings
        )
        return build_training_model(
            TrainingDecoderModel,
            arguments,
            remat=m.remat if remat is None else remat,
            fast_dropout=m.fast_dropout,
        )

    @classmethod
    def loss_and_metrics(cls, label_smoothing: float) -> tuple[Any, list[Any]]:
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing, pad_id=PAD_ID)
        return loss, [
            MaskedSparseCategoricalAccuracy(pad_id=PAD_ID, name="accuracy"),
            MaskedPerplexity(pad_id=PAD_ID, name="perplexity"),
        ]

    @classmethod
    def serving_endpoints(cls, predictor: Any) -> dict[str, tf.types.experimental.GenericFunction]:
        spec = tf.TensorSpec([None], tf.string, name="prompts")

        @tf.function(input_signature=[spec])
        def serving_default(prompts):
            return predictor.generate_strings(prompts)

        @tf.function(input_signature=[spec])
        def generate_nbest(prompts):
            return predictor.generate_strings_nbest(prompts)

        return {"serving_default": serving_default, "generate_nbest": generate_nbest}

    @classmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        return {
            "decoding": {
                **predictor.decoder.settings(),
                "max_new_tokens": predictor.max_new_tokens,
            },
            "model": model_info(predictor.model),
        }

    @classmethod
    def predict_lines(
        cls,
        predictor: Any,
        texts: Sequence[str],
        *,
        nbest: int | None = None,
        progress: bool = False,
    ) -> Iterator[str]:
        """Each prompt with its continuation, a line; with `nbest`,
        `index<TAB>score<TAB>text` lines."""
        n = 1 if nbest is None else nbest
        results = predictor.generate_nbest(texts, n=n, progress=progress)
        for index, (prompt, hypotheses) in enumerate(zip(texts, results)):
            for text, score in hypotheses:
                line = prompt + text
                yield line if nbest is None else f"{index}\t{score:.4f}\t{line}"
