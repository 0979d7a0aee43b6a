"""Packing a padded batch's real positions into one dense run, and back.

A length-bucketed batch of the recipe is about a quarter padding. The position-wise parts of
a Transformer layer (the Q/K/V/output projections, the feed-forward network, LayerNorm,
dropout, the residual sums: two thirds of a training step's op time on CPU) need not run
there: on a packed (N, D) tensor of the real positions they compute the same values at those
positions. Only attention needs the padded (B, T, ...) layout, and gets it from `unpack`.

A `Packing` is `(positions, batch, length)`: int32 (N,) row-major indices of the real
positions into the B * T positions, and the padded batch size and length (int32 scalars).
N changes from batch to batch, so packed code runs outside XLA only (XLA needs static
shapes).

Example:
>>> import numpy as np
>>> packing = packing_of(np.array([[True, True, False], [True, False, False]]))
>>> ops.convert_to_numpy(packing[0]).tolist()
[0, 1, 3]
>>> x = ops.reshape(ops.arange(6, dtype="float32"), (2, 3, 1))
>>> ops.convert_to_numpy(pack(x, packing))[:, 0].tolist()
[0.0, 1.0, 3.0]
>>> ops.convert_to_numpy(unpack(pack(x, packing), packing))[..., 0].tolist()
[[0.0, 1.0, 0.0], [3.0, 0.0, 0.0]]
"""

from __future__ import annotations

from keras import ops

Packing = tuple  # (positions int32 (N,), batch int32 (), length int32 ())


def packing_of(padding_mask) -> Packing:
    """The `Packing` of a bool (B, T) padding mask (True at real positions)."""
    shape = ops.shape(padding_mask)
    flat = ops.reshape(ops.cast(padding_mask, "bool"), (-1,))  # (B * T,)
    positions = ops.cast(ops.nonzero(flat)[0], "int32")
    # Tensors all three: Keras refuses a call argument that mixes tensors and Python ints.
    batch, length = (ops.convert_to_tensor(size, "int32") for size in shape[:2])
    return positions, batch, length  # (N,), (), ()


def pack(x, packing: Packing):
    """The real positions of a padded (B, T, ...) tensor: (N, ...)."""
    positions, batch, length = packing
    shape = ops.shape(x)
    flat = ops.reshape(x, (batch * length, *shape[2:]))  # (B * T, ...)
    return ops.take(flat, positions, axis=0)  # (N, ...)


def unpack(x, packing: Packing):
    """A packed (N, ...) tensor back in the padded layout (B, T, ...), zeros at padding."""
    positions, batch, length = packing
    shape = ops.shape(x)
    flat = ops.scatter(
        ops.expand_dims(positions, -1), x, (batch * length, *shape[1:])
    )  # (B * T, ...)
    return ops.reshape(flat, (batch, length, *shape[1:]))
