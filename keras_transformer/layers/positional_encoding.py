"""Fixed sinusoidal positional encoding (Vaswani et al. 2017, section 3.5)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_transformer.compat import checked_length
from keras_transformer.validation import check_positive_int


def sinusoidal_table(max_length: int, d_model: int) -> np.ndarray:
    """The (max_length, d_model) table, interleaved as in the paper.

    PE(pos, 2i) = sin(pos / 10000^(2i / d_model)),
    PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)).
    """
    positions = np.arange(max_length, dtype=np.float64)[:, None]  # (L, 1)
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]  # (1, ceil(d/2))
    angles = positions / np.power(10000.0, two_i / d_model)  # (L, ceil(d/2))
    table = np.zeros((max_length, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table.astype(np.float32)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEncoding(keras.layers.Layer):
    """Sinusoidal positional encoding; no trainable weights.

    Returns the encoding for the positions of the input sequence, to be added to the token
    embeddings. The table is computed once for every position up to `max_length`.

    Args:
        max_length: the longest sequence the layer accepts.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: a tensor (B, T, d_model) (only its shape is used).
        start_index: int or scalar int tensor, the position of the first element (non-zero
            when decoding one token at a time with a cache).

    Returns:
        A tensor (1, T, d_model) in the layer's compute dtype.

    Example:
    >>> x = keras.ops.zeros((2, 10, 16))
    >>> tuple(PositionalEncoding(max_length=64)(x).shape)
    (1, 10, 16)
    """

    def __init__(self, max_length: int = 512, **kwargs):
        super().__init__(**kwargs)
        self.max_length = check_positive_int("max_length", max_length)
        self.supports_masking = True

    def build(self, inputs_shape):
        self.d_model = inputs_shape[-1]
        # Kept as numpy and made a constant in `call`: a tensor made here would belong to
        # whatever graph is current when the layer is built (e.g. Keras' symbolic build in
        # `fit`) and be out of scope in later graphs.
        self._table = sinusoidal_table(self.max_length, self.d_model)
        self.built = True

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_length:
                raise ValueError(
                    f"Received a sequence of length {start_index + length}, longer than "
                    f"`max_length`={self.max_length}. Truncate the input or build the layer "
                    "with a larger `max_length`."
                )
        else:
            length = checked_length(length, length + start_index, self.max_length)
        table = ops.convert_to_tensor(self._table)  # (L_max, D)
        table = ops.slice(table, (start_index, 0), (length, self.d_model))  # (T, D)
        return ops.cast(ops.expand_dims(table, 0), self.compute_dtype)  # (1, T, D)

    def compute_output_shape(self, inputs_shape):
        return (1, inputs_shape[1], inputs_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update({"max_length": self.max_length})
        return config
