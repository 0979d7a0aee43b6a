"""Layer normalization over the last axis with its gradient written out.

Keras' `LayerNormalization` computes `x * inv + (beta - mean * inv)` (`inv` = gamma over the
standard deviation) and TensorFlow differentiates it op by op: the moments' gradients, their
broadcasts and the sums of each term. The gradient of layer normalization has a closed form
(`dx = inv * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = dy * gamma`), which this
layer uses: fewer and larger ops in the backward pass, the same weights, names and config as
Keras' layer (it is a subclass), in float32 under mixed precision as Keras' is. Other axes
and `rms_scaling` take Keras' path.
"""

from __future__ import annotations

import keras
from keras import ops


def layer_norm_last_axis(x, gamma, beta, epsilon: float):
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis, float32 inside.

    Args:
        x: (..., D) float tensor.
        gamma: (D,) scale.
        beta: (D,) offset.
        epsilon: added to the variance.

    Returns:
        The normalized tensor, float32, of `x`'s shape.
    """

    depth = gamma.shape[-1]

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        mean = ops.mean(x, axis=-1, keepdims=True)  # (..., 1)
        centered = x - mean  # (..., D)
        inv = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) + epsilon)
        normalized = centered * inv  # (..., D)

        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream  # (..., D)
            with keras.name_scope("layer_norm_gradient"):  # for profiles: no layer scope here
                rows = ops.reshape(upstream, (-1, depth))  # (N, D)
                d_beta = ops.sum(rows, axis=0)
                d_gamma = ops.sum(rows * ops.reshape(normalized, (-1, depth)), axis=0)
                g = upstream * gamma  # (..., D)
                d_x = inv * (
                    g
                    - ops.mean(g, axis=-1, keepdims=True)
                    - normalized * ops.mean(g * normalized, axis=-1, keepdims=True)
                )
            return d_x, d_gamma, d_beta

        return normalized * gamma + beta, gradient

    # Cast outside: the cast's own gradient returns dx in x's dtype.
    return normalize(ops.cast(x, "float32"), ops.cast(gamma, "float32"), ops.cast(beta, "float32"))


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """Keras' `LayerNormalization`, with `layer_norm_last_axis` over the last axis.

    Args:
        **kwargs: as Keras' `LayerNormalization` (`axis`, `epsilon`, `center`, `scale`,
            `rms_scaling`, initializers, ...).

    Call arguments:
        inputs: a float tensor (..., D).

    Returns:
        A tensor of the inputs' shape, in the layer's compute dtype.

    Example:
    >>> import numpy as np
    >>> layer = LayerNormalization(epsilon=1e-6)
    >>> y = keras.ops.convert_to_numpy(layer(np.array([[1.0, 2.0, 3.0]], "float32")))
    >>> [round(float(v), 4) for v in y[0]]
    [-1.2247, 0.0, 1.2247]
    """

    def call(self, inputs):
        last = len(inputs.shape) - 1
        if (
            self.rms_scaling
            or self.gamma is None
            or self.beta is None
            or list(self.axis) not in ([-1], [last])
        ):
            return super().call(inputs)
        gamma, beta = ops.convert_to_tensor(self.gamma), ops.convert_to_tensor(self.beta)
        outputs = layer_norm_last_axis(inputs, gamma, beta, self.epsilon)
        return ops.cast(outputs, self.compute_dtype)
