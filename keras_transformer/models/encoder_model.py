"""An encoder-only Transformer with a per-token head (tagging) or a pooled head
(sequence classification)."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer import masks
from keras_transformer.constants import POOLINGS
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder import Encoder
from keras_transformer.models.presets import stack_preset_config
from keras_transformer.validation import (
    check_architecture,
    check_one_of,
    check_optional,
    check_positive_int,
)


def masked_mean(hidden, padding_mask):
    """The mean of `hidden` (B, T, D) over the real positions of `padding_mask` (B, T).

    Summed in float32 (also under mixed precision); a row without real tokens gives zeros.

    Returns:
        (B, D) in the dtype of `hidden`.
    """
    weights = ops.cast(padding_mask, "float32")[:, :, None]  # (B, T, 1)
    total = ops.sum(ops.cast(hidden, "float32") * weights, axis=1)  # (B, D)
    count = ops.maximum(ops.sum(weights, axis=1), 1.0)  # (B, 1)
    return ops.cast(total / count, hidden.dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderModel(keras.Model):
    """The Transformer's encoder stack with a classification head.

    `TransformerEmbedding` (token embedding x sqrt(d_model) + sinusoidal positions), then
    `num_layers` `EncoderLayer`s (the `Encoder` of the translation model), then a linear
    layer over `num_classes`:

    - `pooling=None`: one prediction per token (tagging), logits (B, T, num_classes);
    - `pooling="mean"`: one per sequence, from the mean of the hidden states of the real
      (non-pad) tokens, logits (B, num_classes);
    - `pooling="first"`: one per sequence, from the first token's hidden state through a
      `Dense(d_model, tanh)` pooler (BERT's), logits (B, num_classes). Put a summary token
      first (the package's classification data starts every text with BOS).

    Padding (`pad_id`) is masked out of every attention and of the mean, so outputs at real
    tokens do not depend on how much padding follows. Logits are float32, also under mixed
    precision.

    Args:
        vocabulary_size: the number of token ids.
        num_classes: the number of labels of the head.
        pooling: None (per-token head), `"mean"` or `"first"`.
        num_layers: encoder layers (the paper's N).
        d_model: model size; must divide by `num_heads`.
        num_heads: attention heads (h).
        d_ff: feed-forward inner size.
        dropout: dropout on embeddings, residuals and before the head, in [0, 1).
        attention_dropout: dropout on attention weights, in [0, 1).
        ffn_dropout: dropout on the feed-forward networks' inner activations, in [0, 1);
            None (the default) uses `dropout`.
        activation: feed-forward activation.
        max_length: the longest sequence (positional table size).
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        pad_id: the padding id.
        **kwargs: base model arguments (`name`, `dtype`, ...).

    Call arguments:
        token_ids: int (B, T), padded with `pad_id`.
        return_attention_scores: also return the per-layer self-attention weights, a list
            of (B, H, T, T).
        training: whether dropout is active.

    Returns:
        Logits (B, T, num_classes) or (B, num_classes), float32; then the list of weights
        if requested.

    Example:
    >>> tagger = TransformerEncoderModel.from_preset("tiny", vocabulary_size=100,
    ...                                              num_classes=5)
    >>> tuple(tagger(keras.ops.ones((2, 7), "int32")).shape)
    (2, 7, 5)
    >>> classifier = TransformerEncoderModel.from_preset(
    ...     "tiny", vocabulary_size=100, num_classes=3, pooling="mean")
    >>> tuple(classifier(keras.ops.ones((2, 7), "int32")).shape)
    (2, 3)
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_classes: int,
        pooling: str | None = None,
        num_layers: int = 6,
        d_model: int = 512,
        num_heads: int = 8,
        d_ff: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        ffn_dropout: float | None = None,
        activation: str = "relu",
        max_length: int = 512,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        pad_id: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checked = check_architecture(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            max_length=max_length,
            layer_norm_epsilon=layer_norm_epsilon,
            pad_id=pad_id,
        )
        for name, value in checked.items():
            setattr(self, name, value)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.pooling = check_optional(
            lambda name, value: check_one_of(name, value, POOLINGS), "pooling", pooling
        )
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.encoder = Encoder(
            vocabulary_size,
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            activation=activation,
            max_length=max_length,
            norm_first=norm_first,
            layer_norm_epsilon=layer_norm_epsilon,
            pad_id=pad_id,
            dtype=self.dtype_policy,
            name="encoder",
        )

    @classmethod
    def from_preset(
        cls, preset: str, vocabulary_size: int, num_classes: int, **overrides: Any
    ) -> TransformerEncoderModel:
        """A preset (`"tiny"`, `"base"`, `"big"`) with the preset's encoder layer count.
        Its weights are random: a preset is an architecture, not a pretrained model.

        Example:
        >>> model = TransformerEncoderModel.from_preset(
        ...     "base", vocabulary_size=30000, num_classes=2, pooling="first")
        >>> model.num_layers, model.d_model
        (6, 512)
        """
        arguments = stack_preset_config(preset, "encoder")
        arguments.update(overrides)
        return cls(vocabulary_size=vocabulary_size, num_classes=num_classes, **arguments)

    def build(self, token_ids_shape):
        if not self.encoder.built:
            self.encoder.build(token_ids_shape)
        hidden_shape = (*token_ids_shape, self.d_model)
        features_shape = (
            hidden_shape if self.pooling is None else (token_ids_shape[0], self.d_model)
        )
        self.pooler = None
        if self.pooling == "first":
            self.pooler = keras.layers.Dense(
                self.d_model, activation="tanh", dtype=self.dtype_policy, name="pooler"
            )
            self.pooler.build(features_shape)
        self.head_dropout = Dropout(self.dropout, dtype=self.dtype_policy, name="head_dropout")
        self.classifier = keras.layers.Dense(
            self.num_classes, dtype=self.dtype_policy, name="classifier"
        )
        self.classifier.build(features_shape)
        self.built = True

    def call(self, token_ids, return_attention_scores: bool = False, training=None):
        padding_mask = masks.padding_mask(token_ids, self.pad_id)  # (B, T)
        encoded = self.encoder(
            token_ids,
            padding_mask=padding_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )  # (B, T, D)[, list of (B, H, T, T)]
        hidden, weights = encoded if return_attention_scores else (encoded, None)
        if self.pooling == "mean":
            features = masked_mean(hidden, padding_mask)  # (B, D)
        elif self.pooling == "first":
            features = self.pooler(hidden[:, 0, :])  # (B, D)
        else:
            features = hidden  # (B, T, D)
        logits = self.classifier(self.head_dropout(features, training=training))
        logits = ops.cast(logits, "float32")  # (B, T, C) or (B, C)
        return (logits, weights) if return_attention_scores else logits

    def compute_output_shape(self, token_ids_shape):
        if self.pooling is None:
            return (*token_ids_shape, self.num_classes)
        return (token_ids_shape[0], self.num_classes)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "num_layers": self.num_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "ffn_dropout": self.ffn_dropout,
            "activation": self.activation,
            "max_length": self.max_length,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pad_id": self.pad_id,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(**config)
