"""`layers.LayerNormalization`: Keras' layer with the closed-form gradient over the last axis;
its values and gradients against Keras' own layer, float32 and mixed bfloat16."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.layer_normalization import LayerNormalization


def pair(shape, epsilon=1e-6, dtype=None, **kwargs):
    """Ours and Keras' layer, built on `shape`, with the same random gamma and beta."""
    ours = LayerNormalization(epsilon=epsilon, dtype=dtype, **kwargs)
    theirs = keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, **kwargs)
    ours.build(shape)
    theirs.build(shape)
    rng = np.random.default_rng(3)
    weights = [rng.normal(1.0, 0.5, w.shape).astype("float32") for w in theirs.weights]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


def values_and_gradients(layer, x, upstream):
    """The layer's output and the gradients of `sum(output * upstream)` with respect to the
    input and each weight, from a `tf.function` traced for unknown leading dimensions."""

    @tf.function(input_signature=[tf.TensorSpec([None, None, x.shape[-1]], x.dtype)] * 2)
    def run(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(upstream, tf.float32))
        return y, tape.gradient(loss, [x, *layer.trainable_variables])

    y, grads = run(x, upstream)
    return y, grads


@pytest.mark.parametrize("shape", [(4, 9, 16), (2, 3, 7)])
def test_values_and_gradients_match_keras_float32(shape):
    ours, theirs = pair(shape)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(0.3, 2.0, shape).astype("float32"))
    upstream = tf.constant(rng.normal(size=shape).astype("float32"))
    y_ours, g_ours = values_and_gradients(ours, x, upstream)
    y_theirs, g_theirs = values_and_gradients(theirs, x, upstream)
    np.testing.assert_allclose(y_ours.numpy(), y_theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert len(g_ours) == 3
    for a, b in zip(g_ours, g_theirs):  # input, gamma, beta
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_mixed_bfloat16_computes_in_float32_and_returns_bfloat16():
    shape = (4, 9, 16)
    ours, theirs = pair(shape, dtype="mixed_bfloat16")
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=shape), tf.bfloat16)
    upstream = tf.constant(rng.normal(size=shape), tf.bfloat16)
    y_ours, g_ours = values_and_gradients(ours, x, upstream)
    y_theirs, g_theirs = values_and_gradients(theirs, x, upstream)
    assert y_ours.dtype == tf.bfloat16 and g_ours[0].dtype == tf.bfloat16
    assert g_ours[1].dtype == tf.float32  # the weights stay float32
    np.testing.assert_allclose(
        tf.cast(y_ours, tf.float32).numpy(), tf.cast(y_theirs, tf.float32).numpy(), atol=2e-2
    )
    for a, b in zip(g_ours, g_theirs):
        a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())


@pytest.mark.parametrize("kwargs", [{"rms_scaling": True}, {"axis": 1}, {"center": False}])
def test_other_settings_are_keras_layer(kwargs):
    shape = (2, 5, 6)
    ours, theirs = pair(shape, **kwargs)
    x = tf.constant(np.random.default_rng(2).normal(size=shape).astype("float32"))
    np.testing.assert_array_equal(ours(x).numpy(), theirs(x).numpy())


def test_config_round_trip_and_the_blocks_use_it():
    layer = LayerNormalization(epsilon=1e-5, name="n")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is LayerNormalization
    assert restored.get_config() == layer.get_config()

    from keras_transformer.layers import EncoderLayer

    block = EncoderLayer(num_heads=2, d_ff=16)
    block.build((2, 3, 8))
    for norm in (block.self_attention_norm, block.feed_forward_norm):
        assert type(norm) is LayerNormalization
