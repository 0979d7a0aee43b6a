"""Shared arguments of the encoder and decoder layers, and their residual sublayer wiring."""

from __future__ import annotations

from collections.abc import Callable

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.validation import check_architecture


class BlockBase(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their common arguments and config.

    Not public: see the subclasses for the arguments.
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        ffn_dropout: float | None = None,
        activation="relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checked = check_architecture(
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        for name, value in checked.items():
            setattr(self, name, value)
        self.activation = keras.activations.get(activation)
        self.norm_first = bool(norm_first)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "d_ff": self.d_ff,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "ffn_dropout": self.ffn_dropout,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config

    @property
    def ffn_rate(self) -> float:
        """The feed-forward network's inner dropout rate: `ffn_dropout`, else `dropout`."""
        return self.dropout if self.ffn_dropout is None else self.ffn_dropout

    def rematerialized_call(self, layer_call, *args, **kwargs):
        """Keras' rematerialization (`keras.RematScope`) of `call`, with keyword arguments.

        Keras wraps `call` in `tf.recompute_grad`, whose custom gradient accepts keyword
        arguments only when executing eagerly: inside `fit`'s compiled step the layer's
        `padding_mask=...`/`training=...` would fail. Floating-point keyword arguments are
        passed to the wrapped function positionally (they need gradients) and the others
        (masks, Python values, None) are bound in a closure, so the same recomputation
        works in graphs.
        """
        if super().rematerialized_call(layer_call, *args, **kwargs) is layer_call:
            return layer_call  # this layer is not rematerialized

        def call(*call_args, **call_kwargs):
            names = [k for k, v in call_kwargs.items() if _is_float_tensor(v)]
            bound = {k: v for k, v in call_kwargs.items() if k not in names}
            count = len(call_args)

            def positional(*values):
                return layer_call(*values[:count], **bound, **dict(zip(names, values[count:])))

            rematerialized = super(BlockBase, self).rematerialized_call(
                positional, *call_args, **call_kwargs
            )
            return rematerialized(*call_args, *(call_kwargs[k] for k in names))

        return call

    def _build_norm_and_dropout(self, prefix: str, inputs_shape) -> None:
        """Creates and builds `{prefix}_norm` and `{prefix}_dropout`."""
        norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{prefix}_norm"
        )
        norm.build(inputs_shape)
        dropout = Dropout(self.dropout, dtype=self.dtype_policy, name=f"{prefix}_dropout")
        setattr(self, f"{prefix}_norm", norm)
        setattr(self, f"{prefix}_dropout", dropout)

    def _residual(self, prefix: str, x, sublayer: Callable, training=None):
        """Applies one sublayer with its residual connection, dropout and LayerNorm.

        Post-norm (the paper): `LayerNorm(x + Dropout(sublayer(x)))`.
        Pre-norm: `x + Dropout(sublayer(LayerNorm(x)))`.

        Args:
            prefix: names the sublayer's `{prefix}_norm` and `{prefix}_dropout`.
            x: (B, T, d_model).
            sublayer: called on the (normalized) input; returns a tensor, or a tuple whose
                first element is the tensor and whose other elements are passed through.
            training: whether dropout is active.

        Returns:
            `(output, extras)`: output (B, T, d_model) and the tuple of the sublayer's extra
            results (empty when it returned a tensor).
        """
        norm = getattr(self, f"{prefix}_norm")
        dropout = getattr(self, f"{prefix}_dropout")
        y = sublayer(norm(x) if self.norm_first else x)
        y, extras = (y[0], tuple(y[1:])) if isinstance(y, tuple) else (y, ())
        x = x + dropout(y, training=training)
        return (x if self.norm_first else norm(x)), extras


def _is_float_tensor(value) -> bool:
    return keras.ops.is_tensor(value) and "float" in keras.backend.standardize_dtype(value.dtype)
