"""What the encoder-only tasks share (tagging, classification): label names kept with the
run and the `TransformerEncoderModel`; and what every one-tokenizer task uses (the model's
arguments, the loaders' options, the texts its tokenizer learns from)."""

from __future__ import annotations

import abc
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.data.task_sources import TaskData
from keras_transformer.tasks.base import Task
from keras_transformer.training.models import TrainingEncoderModel, build_training_model
from keras_transformer.training.strategies import resolve_dtype_policy


def model_arguments(config: Any, vocabulary_size: int, dtype_policy: str | None) -> dict:
    """The constructor arguments every task's model shares, from the `model` section."""
    m = config.model
    return {
        "vocabulary_size": vocabulary_size,
        "d_model": m.d_model,
        "num_heads": m.num_heads,
        "d_ff": m.d_ff,
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "ffn_dropout": m.ffn_dropout,
        "activation": m.activation,
        "max_length": m.max_length,
        "norm_first": m.norm_first,
        "layer_norm_epsilon": m.layer_norm_epsilon,
        "pad_id": m.pad_id,
        "dtype": resolve_dtype_policy(dtype_policy or config.training.dtype_policy),
    }


class LabelledTask(Task, abc.ABC):
    """Tagging and classification: `TransformerEncoderModel` with a head over the labels."""

    labelled = True
    hard_vocab_limit = False
    main_metric = "accuracy"

    @abc.abstractmethod
    def num_classes(self, labels: tuple[str, ...]) -> int:
        """The classes of the model's head."""

    @property
    def pooling(self) -> str | None:
        """The sequence head's pooling (None: a per-token head)."""
        return None

    def build_model(
        self,
        tokenizers: tuple[Any, Any],
        labels: tuple[str, ...] | None,
        *,
        remat: bool | None = None,
        dtype_policy: str | None = None,
    ) -> keras.Model:
        if not labels:
            raise ValueError(f"Expected the label names for task {self.name!r}. Received none.")
        m = self.config.model
        arguments = model_arguments(self.config, tokenizers[0].vocab_size, dtype_policy)
        arguments.update(
            num_layers=m.num_encoder_layers,
            num_classes=self.num_classes(labels),
            pooling=self.pooling,
        )
        return build_training_model(
            TrainingEncoderModel,
            arguments,
            remat=m.remat if remat is None else remat,
            fast_dropout=m.fast_dropout,
        )

    @classmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        return {
            "labels": list(predictor.labels),
            "model": model_info(predictor.model),
        }


def source_options(task: Task) -> dict[str, Any]:
    """What a one-tokenizer task's loader (`data.task_sources`) takes from the config besides
    the task section's features: the offline fallback, TFDS's folder and download."""
    d = task.config.data
    return {"fallback": task.section.fallback, "data_dir": d.data_dir, "download": d.download}


def model_info(model: keras.Model) -> dict[str, Any]:
    """The model's architecture as `export_info.json` records it."""
    config = model.get_config()
    return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}


def task_texts(data: TaskData, text: Any) -> tf.data.Dataset:
    """`(text, "")` pairs of each example's text: the one tokenizer learns from them."""
    return data.dataset.map(lambda *example: (text(*example), ""))
