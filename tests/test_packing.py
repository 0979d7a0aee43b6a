"""`keras_transformer.packing`: `pack` and `unpack` and their hand-written gradients (row
gathers both ways), against numpy, inside a `tf.function` traced for unknown shapes."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.packing import pack, packing_of, unpack


def padding_mask(seed):
    """A (5, 7) bool mask with rows of random lengths, one of them empty."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 8, 5)
    lengths[2] = 0
    return np.arange(7)[None] < lengths[:, None]


@pytest.mark.parametrize("seed", [0, 1])
def test_pack_unpack_and_their_gradients_match_numpy(seed):
    mask = padding_mask(seed)
    rng = np.random.default_rng(seed + 10)
    real = int(mask.sum())
    padded = rng.standard_normal((*mask.shape, 3)).astype("float32")  # (B, T, D)
    packed = rng.standard_normal((real, 3)).astype("float32")  # (N, D)
    padded_weights = rng.standard_normal(padded.shape).astype("float32")
    packed_weights = rng.standard_normal(packed.shape).astype("float32")

    spec = tf.TensorSpec([None, None, None], tf.float32)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.bool),
            spec,
            tf.TensorSpec([None, None], tf.float32),
            spec,
            tf.TensorSpec([None, None], tf.float32),
        ]
    )
    def run(mask, padded, packed, padded_weights, packed_weights):
        packing = packing_of(mask)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([padded, packed])
            packed_out = pack(padded, packing)  # (N, D)
            padded_out = unpack(packed, packing)  # (B, T, D)
            pack_loss = tf.reduce_sum(packed_out * packed_weights)
            unpack_loss = tf.reduce_sum(padded_out * padded_weights)
        return (
            packed_out,
            padded_out,
            tape.gradient(pack_loss, padded),
            tape.gradient(unpack_loss, packed),
        )

    packed_out, padded_out, pack_grad, unpack_grad = (
        t.numpy() for t in run(mask, padded, packed, padded_weights, packed_weights)
    )
    np.testing.assert_array_equal(packed_out, padded[mask])
    expected_padded = np.zeros_like(padded)
    expected_padded[mask] = packed
    np.testing.assert_array_equal(padded_out, expected_padded)
    # d/d padded of sum(pack(padded) * w): w at the real positions, zeros at padding.
    expected_pack_grad = np.zeros_like(padded)
    expected_pack_grad[mask] = packed_weights
    np.testing.assert_array_equal(pack_grad, expected_pack_grad)
    # d/d packed of sum(unpack(packed) * w): w's real positions, packed.
    np.testing.assert_array_equal(unpack_grad, padded_weights[mask])


def test_packing_rows_point_at_the_packed_rows_and_at_a_zero_row_for_padding():
    mask = np.array([[True, False, True], [False, False, False], [True, True, False]])
    positions, batch, length, rows = (t.numpy() for t in packing_of(mask))
    assert positions.tolist() == [0, 2, 6, 7]
    assert (int(batch), int(length)) == (3, 3)
    assert rows.tolist() == [0, 4, 1, 4, 4, 4, 2, 3, 4]
