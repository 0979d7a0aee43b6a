"""`layers.dropout`: the 16-bit mask's statistics, its gradient, its seeds, and the scope
that turns it on for the layers of a training model (`model.fast_dropout`), and the
feed-forward networks' own rate (`model.ffn_dropout`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import Dropout, FeedForward
from keras_transformer.layers.dropout import fast_dropout_scope, uint16_dropout


@pytest.mark.parametrize("rate", [0.1, 0.3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mask_drops_the_rate_and_keeps_the_mean(rate, dtype):
    x = tf.ones((64, 128, 256), dtype)  # 2,097,152 elements: the fraction's sd is ~2e-4
    y = uint16_dropout(x, rate, tf.constant([3, 4], tf.int32)).numpy().astype(np.float64)
    dropped = float((y == 0).mean())
    assert abs(dropped - rate) < 2e-3
    kept = np.unique(y[y != 0])
    assert kept.size == 1  # one scale, the inverse keep probability
    assert abs(float(kept[0]) - 1 / (1 - rate)) < (1e-2 if dtype == "bfloat16" else 1e-5)
    assert abs(y.mean() - 1.0) < 1e-2


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 1), (4, 6)])
def test_odd_and_dynamic_last_dimensions(shape):
    fn = tf.function(
        lambda x: uint16_dropout(x, 0.5, tf.constant([1, 2], tf.int32)),
        input_signature=[tf.TensorSpec([None] * len(shape), tf.float32)],
    )
    y = fn(tf.ones(shape)).numpy()
    assert y.shape == shape
    assert set(np.unique(y).tolist()) <= {0.0, 2.0}


def test_the_two_halves_of_each_draw_are_independent():
    # Elements 2i and 2i + 1 share a 32-bit draw: their drops must still be independent.
    y = uint16_dropout(tf.ones((1000, 1000)), 0.5, tf.constant([5, 6], tf.int32)).numpy()
    even, odd = y[:, 0::2] == 0, y[:, 1::2] == 0
    assert abs(float((even & odd).mean()) - 0.25) < 5e-3


def test_gradient_is_the_mask_times_the_scale():
    x = tf.random.normal((8, 64))
    seed = tf.constant([7, 8], tf.int32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = uint16_dropout(x, 0.2, seed)
    grad = tape.gradient(y, x).numpy()
    scale = 65536 / (65536 - round(0.2 * 65536))
    np.testing.assert_allclose(grad, np.where(y.numpy() == 0, 0.0, scale), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_default_mask_is_keras_dropout_and_its_gradient(dtype, rate):
    """fast=False: Keras' own draws, mask and scale (`scaled_mask_dropout`), three calls in a
    row (each call draws a new seed, as Keras' layer does), values and gradients."""
    ours = Dropout(rate, seed=5, dtype=dtype)
    theirs = keras.layers.Dropout(rate, seed=5, dtype=dtype)
    x = tf.cast(tf.random.stateless_normal((16, 33, 40), [1, 2]), dtype)
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y_ours, y_theirs = ours(x, training=True), theirs(x, training=True)
            weights = tf.cast(tf.range(tf.size(x)) % 7, dtype)
            loss_ours = tf.reduce_sum(tf.reshape(y_ours, [-1]) * weights)
            loss_theirs = tf.reduce_sum(tf.reshape(y_theirs, [-1]) * weights)
        np.testing.assert_array_equal(
            tf.cast(y_ours, tf.float32).numpy(), tf.cast(y_theirs, tf.float32).numpy()
        )
        np.testing.assert_array_equal(
            tf.cast(tape.gradient(loss_ours, x), tf.float32).numpy(),
            tf.cast(tape.gradient(loss_theirs, x), tf.float32).numpy(),
        )
    dropped = float((tf.cast(y_ours, tf.float32).numpy() == 0).mean())
    assert abs(dropped - rate) < 0.05  # a mask was applied at all


def test_layer_draws_new_masks_each_call_and_only_in_training():
    layer = Dropout(0.5, fast=True, seed=11)
    x = np.ones((16, 64), "float32")
    first = keras.ops.convert_to_numpy(layer(x, training=True))
    second = keras.ops.convert_to_numpy(layer(x, training=True))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)
    again = Dropout(0.5, fast=True, seed=11)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(again(x, training=True)), first
    )  # the same seed, the same first mask


def test_scope_sets_the_default_and_the_config_keeps_it():
    with fast_dropout_scope():
        inside = Dropout(0.1)
        explicit = Dropout(0.1, fast=False)
    assert inside.fast and not explicit.fast and not Dropout(0.1).fast
    restored = Dropout.from_config(inside.get_config())
    assert restored.fast and restored.rate == 0.1


def test_fast_dropout_reaches_every_dropout_of_a_training_model():
    from keras_transformer import TransformerConfig
    from keras_transformer.training.models import build_transformer

    config = TransformerConfig(
        source_vocab_size=40, target_vocab_size=40, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=1, max_length=16, attention_dropout=0.1,
    )  # fmt: skip
    for fast in (True, False):
        model = build_transformer(config, fast_dropout=fast, remat=fast)
        dropouts = [
            layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)
        ]
        # Embeddings 2, residuals 2 + 3, feed-forward inner 2, attention weights 3.
        assert len(dropouts) == 12
        assert all(isinstance(d, Dropout) and d.fast == fast for d in dropouts)


def _feed_forward_and_other_rates(model):
    """The inner rates of the feed-forward networks, and the rates of every other dropout."""
    inner = [layer for layer in model._flatten_layers() if isinstance(layer, FeedForward)]
    inner_dropouts = {id(f.dropout_layer) for f in inner}
    others = [
        layer.rate
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Dropout)
        and id(layer) not in inner_dropouts
        and layer.name != "attention_dropout"  # on the attention weights
    ]
    return [f.dropout_layer.rate for f in inner], others


@pytest.mark.parametrize("ffn_dropout, expected", [(None, 0.3), (0.0, 0.0), (0.05, 0.05)])
def test_ffn_dropout_sets_the_feed_forward_inner_rate_only(ffn_dropout, expected, tmp_path):
    from keras_transformer import Transformer

    model = Transformer(
        source_vocab_size=40, target_vocab_size=40, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=2, num_decoder_layers=1, max_length=16, dropout=0.3,
        ffn_dropout=ffn_dropout,
    )  # fmt: skip
    model.build(((2, 5), (2, 4)))
    inner, others = _feed_forward_and_other_rates(model)
    # One inner dropout per layer; embeddings 2 and residuals 2 * 2 + 3 keep `dropout`.
    assert inner == [expected] * 3
    assert others == [0.3] * 9
    assert model.transformer_config().ffn_dropout == ffn_dropout
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert _feed_forward_and_other_rates(restored) == (inner, others)


def test_ffn_dropout_is_applied_in_training_only():
    from keras_transformer.layers.encoder_layer import EncoderLayer

    x = tf.random.stateless_normal((2, 6, 16), seed=(1, 2))
    for ffn_dropout, dropped in ((0.0, False), (0.9, True)):
        layer = EncoderLayer(num_heads=2, d_ff=64, dropout=0.0, ffn_dropout=ffn_dropout)
        inference = layer(x, training=False)
        training = layer(x, training=True)
        assert (not np.allclose(training, inference, atol=1e-6)) == dropped


def test_ffn_dropout_from_the_experiment_config_reaches_every_task_model():
    from keras_transformer.config.loading import load_config
    from keras_transformer.models.decoder_model import TransformerDecoderModel
    from keras_transformer.tasks.labelled import model_arguments

    config = load_config("multi30k_de_en", ["model.ffn_dropout=0", "model.dropout=0.2"])
    arguments = model_arguments(config, vocabulary_size=40, dtype_policy=None)
    model = TransformerDecoderModel(**{**arguments, "d_model": 16, "num_heads": 2, "d_ff": 32})
    model.build((2, 5))
    inner, others = _feed_forward_and_other_rates(model)
    assert inner == [0.0] * model.num_layers and set(others) == {0.2}
    transformer = config.model.to_transformer_config(40, 40)
    assert transformer.ffn_dropout == 0.0 and transformer.dropout == 0.2
