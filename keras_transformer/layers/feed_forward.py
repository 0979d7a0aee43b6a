"""Position-wise feed-forward network (section 3.3)."""

from __future__ import annotations

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.validation import check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """`Dense(d_ff, activation) -> Dropout -> Dense(d_model)`, applied at every position.

    Args:
        d_ff: inner size (the paper's d_ff).
        activation: activation of the inner layer; ReLU as in the paper.
        dropout: dropout rate on the inner activations.
        kernel_initializer: initializer of both kernels.
        bias_initializer: initializer of both biases.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (B, T, d_model).
        training: whether dropout is active.

    Returns:
        (B, T, d_model); d_model is taken from the input.

    Example:
    >>> tuple(FeedForward(d_ff=64)(keras.ops.ones((2, 5, 16))).shape)
    (2, 5, 16)
    """

    def __init__(
        self,
        d_ff: int,
        activation="relu",
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_ff = check_positive_int("d_ff", d_ff)
        self.activation = keras.activations.get(activation)
        self.dropout = check_rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, inputs_shape):
        d_model = inputs_shape[-1]
        common = {
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "dtype": self.dtype_policy,
        }
        self.inner_dense = keras.layers.Dense(
            self.d_ff, activation=self.activation, name="inner_dense", **common
        )
        self.inner_dense.build(inputs_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.output_dense = keras.layers.Dense(d_model, name="output_dense", **common)
        self.output_dense.build((*inputs_shape[:-1], self.d_ff))
        self.built = True

    def call(self, inputs, training=None):
        x = self.inner_dense(inputs)  # (B, T, d_ff)
        x = self.dropout_layer(x, training=training)
        return self.output_dense(x)  # (B, T, d_model)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_ff": self.d_ff,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
