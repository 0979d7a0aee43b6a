"""The models, losses and metrics of the tagging, classification and language-modelling
tasks, ready for `fit` under every `tf.distribute` strategy."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_transformer.constants import NO_TAG_ID, PAD_ID
from keras_transformer.models.decoder_model import TransformerDecoderModel
from keras_transformer.models.encoder_model import TransformerEncoderModel
from keras_transformer.training.distributed import DistributedTrainingMixin
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedPerplexity, MaskedSparseCategoricalAccuracy


def _plain_copy(model: keras.Model, cls: type) -> keras.Model:
    plain = cls.from_config(model.get_config())
    _build(plain)
    plain.set_weights(model.get_weights())
    return plain


def _build(model: keras.Model) -> None:
    """Builds eagerly on a tiny batch (see `training.trainer`: not inside `fit`'s graph)."""
    model(np.full((1, 2), 4, "int32"), training=False)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingEncoderModel(DistributedTrainingMixin, TransformerEncoderModel):
    """A `TransformerEncoderModel` whose `fit` works under every `tf.distribute` strategy
    (`DistributedTrainingMixin`); `to_plain()` returns a plain one with the same weights.

    Example:
    >>> model = TrainingEncoderModel.from_preset("tiny", vocabulary_size=50, num_classes=3)
    >>> logits = model(keras.ops.ones((1, 4), "int32"))
    >>> type(model.to_plain()).__name__
    'TransformerEncoderModel'
    """

    def to_plain(self) -> TransformerEncoderModel:
        return _plain_copy(self, TransformerEncoderModel)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingDecoderModel(DistributedTrainingMixin, TransformerDecoderModel):
    """A `TransformerDecoderModel` whose `fit` works under every `tf.distribute` strategy
    (`DistributedTrainingMixin`); `to_plain()` returns a plain one with the same weights.

    Example:
    >>> model = TrainingDecoderModel.from_preset("tiny", vocabulary_size=50)
    >>> logits = model(keras.ops.ones((1, 4), "int32"))
    >>> type(model.to_plain()).__name__
    'TransformerDecoderModel'
    """

    def to_plain(self) -> TransformerDecoderModel:
        return _plain_copy(self, TransformerDecoderModel)


def num_classes(task: str, labels: tuple[str, ...]) -> int:
    """The classes of the model's head: the labels, plus `NO_TAG_ID` when tagging."""
    return len(labels) + 1 if task == "tagging" else len(labels)


def build_task_model(
    config: Any,
    vocabulary_size: int,
    labels: tuple[str, ...] | None = None,
    *,
    remat: bool | None = None,
    dtype_policy: str | None = None,
) -> keras.Model:
    """Creates and builds the task's training model, under the current strategy scope.

    Args:
        config: an `ExperimentConfig` (its `task`, `model` section and task section).
        vocabulary_size: the tokenizer's.
        labels: the label names (tagging, classification).
        remat: recompute each layer's activations in the backward pass; defaults to
            `config.model.remat`.
        dtype_policy: e.g. `"mixed_float16"`; defaults to `config.training.dtype_policy`.

    Returns:
        A built `TrainingEncoderModel` or `TrainingDecoderModel`.
    """
    m = config.model
    arguments = {
        "vocabulary_size": vocabulary_size,
        "d_model": m.d_model,
        "num_heads": m.num_heads,
        "d_ff": m.d_ff,
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "activation": m.activation,
        "max_length": m.max_length,
        "norm_first": m.norm_first,
        "layer_norm_epsilon": m.layer_norm_epsilon,
        "pad_id": m.pad_id,
        "dtype": dtype_policy or config.training.dtype_policy,
    }
    if config.task == "language_modeling":
        cls = TrainingDecoderModel
        arguments.update(
            num_layers=m.num_decoder_layers, tie_output_embeddings=m.tie_output_embeddings
        )
    else:
        if not labels:
            raise ValueError(f"Expected the label names for task {config.task!r}. Received none.")
        cls = TrainingEncoderModel
        pooling = config.classification.pooling if config.task == "classification" else None
        arguments.update(
            num_layers=m.num_encoder_layers,
            num_classes=num_classes(config.task, labels),
            pooling=pooling,
        )
    remat = m.remat if remat is None else remat
    if remat:
        names = [f"layer_{i}" for i in range(arguments["num_layers"])]
        with keras.RematScope(mode="list_of_layers", layer_names=names):
            model = cls(**arguments)
            _build(model)
    else:
        model = cls(**arguments)
        _build(model)
    return model


def task_loss_and_metrics(task: str, label_smoothing: float = 0.0):
    """`(loss, metrics)` of a task, for `compile`.

    Tagging and language modelling average the label-smoothed cross-entropy over the
    labelled tokens (`NO_TAG_ID`/`PAD_ID` left out) and report their `accuracy`;
    classification averages it over the examples; language modelling also reports the
    `perplexity` (from the unsmoothed log-likelihood).
    """
    pad_id = {"tagging": NO_TAG_ID, "classification": None, "language_modeling": PAD_ID}[task]
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing, pad_id=pad_id)
    metrics: list[keras.metrics.Metric] = [
        MaskedSparseCategoricalAccuracy(pad_id=pad_id, name="accuracy")
    ]
    if task == "language_modeling":
        metrics.append(MaskedPerplexity(pad_id=PAD_ID, name="perplexity"))
    return loss, metrics
