"""Packing a padded batch's real positions into one dense run, and back.

A length-bucketed batch of the recipe is about a quarter padding. The position-wise parts of
a Transformer layer (the Q/K/V/output projections, the feed-forward network, LayerNorm,
dropout, the residual sums: two thirds of a training step's op time on CPU) need not run
there: on a packed (N, D) tensor of the real positions they compute the same values at those
positions. Only attention needs the padded (B, T, ...) layout, and gets it from `unpack`.

A `Packing` is `(positions, batch, length, rows)`: int32 (N,) row-major indices of the real
positions into the B * T positions, the padded batch size and length (int32 scalars), and
int32 (B * T,) the packed row of each position (N at padding). N changes from batch to
batch, so packed code runs outside XLA only (XLA needs static shapes).

Both directions, and both gradients, are row gathers (`ops.take`): `unpack` gathers from the
packed rows and one row of zeros, and its gradient gathers the real positions; `pack`'s
gradient gathers the other way (the positions are distinct, so no gradient sums two rows).
Autodiff's would be a `ScatterNd` forward and an `UnsortedSegmentSum` backward: 34% and 20%
of attention's 87.5 ms of other ops a step of the recipe in float32 on a 2-core Xeon
(`benchmarks/train_profile.py`, README), and 1.22x the time of the gathers for a pack and
unpack, forward and backward, over (160, 34, 256) float32 (`benchmarks/pieces.py`; the same
values).

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

import keras
from keras import ops

Packing = tuple  # (positions int32 (N,), batch int32 (), length int32 (), rows int32 (B * T,))


def packing_of(padding_mask) -> Packing:
    """The `Packing` of a bool (B, T) padding mask (True at real positions)."""
    shape = ops.shape(padding_mask)
    flat = ops.reshape(ops.cast(padding_mask, "bool"), (-1,))  # (B * T,)
    positions = ops.cast(ops.nonzero(flat)[0], "int32")  # (N,)
    # The packed row of each of the B * T positions; N, a row of zeros, at padding.
    rows = ops.cumsum(ops.cast(flat, "int32")) - 1
    rows = ops.where(flat, rows, ops.shape(positions)[0])  # (B * T,)
    # Tensors all: Keras refuses a call argument that mixes tensors and Python ints.
    batch, length = (ops.convert_to_tensor(size, "int32") for size in shape[:2])
    return positions, batch, length, rows  # (N,), (), (), (B * T,)


def _gather_rows(x, indices):
    """`x[indices]` along axis 0."""
    return ops.take(x, indices, axis=0)


def _gather_rows_or_zeros(x, rows):
    """`x[rows]` along axis 0, zeros where a row is `len(x)`."""
    zeros = ops.zeros((1, *ops.shape(x)[1:]), x.dtype)
    return ops.take(ops.concatenate([x, zeros], axis=0), rows, axis=0)


def pack(x, packing: Packing):
    """The real positions of a padded (B, T, ...) tensor: (N, ...)."""
    positions, batch, length, rows = packing
    shape = ops.shape(x)

    @ops.custom_gradient
    def packed(x):
        flat = ops.reshape(x, (batch * length, *shape[2:]))  # (B * T, ...)

        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream  # (N, ...)
            with keras.name_scope("pack_gradient"):  # names for profiles
                return ops.reshape(_gather_rows_or_zeros(upstream, rows), shape)

        return _gather_rows(flat, positions), gradient  # (N, ...)

    return packed(x)


def unpack(x, packing: Packing):
    """A packed (N, ...) tensor back in the padded layout (B, T, ...), zeros at padding."""
    positions, batch, length, rows = packing
    shape = ops.shape(x)

    @ops.custom_gradient
    def unpacked(x):
        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream  # (B, T, ...)
            with keras.name_scope("unpack_gradient"):  # names for profiles
                flat = ops.reshape(upstream, (batch * length, *shape[1:]))
                return _gather_rows(flat, positions)  # (N, ...)

        flat = _gather_rows_or_zeros(x, rows)  # (B * T, ...)
        return ops.reshape(flat, (batch, length, *shape[1:])), gradient

    return unpacked(x)
