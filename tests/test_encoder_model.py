"""The encoder-only model: heads, padding, save/load, presets, precision, remat."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerEncoderModel
from keras_transformer.models.encoder_model import masked_mean

V, C = 60, 5
POOLINGS = [None, "mean", "first"]


def tiny(pooling=None, **overrides):
    return TransformerEncoderModel.from_preset(
        "tiny", vocabulary_size=V, num_classes=C, pooling=pooling, **overrides
    )


def batch(b=3, t=9):
    rng = np.random.default_rng(0)
    ids = rng.integers(1, V, size=(b, t)).astype("int32")
    ids[1, 5:] = 0
    ids[2, 2:] = 0
    return ids


@pytest.mark.parametrize("pooling", POOLINGS)
def test_logits_shape_and_dtype_eager_and_in_tf_function(pooling):
    model = tiny(pooling)
    ids = batch()
    logits = model(ids)
    assert logits.dtype == tf.float32
    assert logits.shape == ((3, 9, C) if pooling is None else (3, C))
    fn = tf.function(model, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_allclose(fn(ids), logits, atol=1e-5)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_padding_invariance(pooling):
    model = tiny(pooling, norm_first=pooling == "mean")
    ids = batch()
    logits = np.asarray(model(ids))
    padded = np.asarray(model(np.pad(ids, ((0, 0), (0, 6)))))
    if pooling is None:
        real = ids != 0
        np.testing.assert_allclose(padded[:, :9][real], logits[real], atol=1e-5)
    else:
        np.testing.assert_allclose(padded, logits, atol=1e-5)
    # And the padding is not ignored by accident: real tokens do change the output.
    changed = ids.copy()
    changed[2, 1] = changed[2, 1] % (V - 1) + 1
    assert not np.allclose(np.asarray(model(changed))[2], logits[2], atol=1e-5)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_no_leak_across_rows_or_from_padding(pooling):
    """Each row is computed alone (no mask broadcast across the batch); padding gets no
    attention; the encoder is bidirectional (a late token changes the first output)."""
    model = tiny(pooling)
    ids = batch()
    logits, weights = model(ids, return_attention_scores=True)
    for i in range(len(ids)):
        length = int((ids[i] != 0).sum())
        alone = np.asarray(model(ids[i : i + 1, :length]))[0]
        expected = np.asarray(logits)[i]
        np.testing.assert_allclose(
            alone, expected[:length] if pooling is None else expected, atol=1e-5
        )
    attention = np.asarray(weights[0])  # (B, H, T, T)
    assert attention[2, :, :, 2:].max() < 1e-7 and attention[1, :, :, 5:].max() < 1e-7
    if pooling is None:
        changed = ids.copy()
        changed[0, -1] = changed[0, -1] % (V - 1) + 1
        assert not np.allclose(np.asarray(model(changed))[0, 0], np.asarray(logits)[0, 0])


def test_mean_and_first_pooling_read_the_encoder_output():
    ids = batch()
    mean_model = tiny("mean")
    hidden = mean_model.encoder(ids)
    pooled = np.asarray(masked_mean(hidden, ids != 0))
    for i, length in enumerate((ids != 0).sum(1)):
        np.testing.assert_allclose(pooled[i], np.asarray(hidden)[i, :length].mean(0), atol=1e-5)
    np.testing.assert_allclose(mean_model(ids), mean_model.classifier(pooled), atol=1e-5)

    first_model = tiny("first")
    logits = first_model(ids)
    hidden = first_model.encoder(ids)
    expected = first_model.classifier(first_model.pooler(hidden[:, 0]))
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert first_model.pooler.activation is keras.activations.tanh


@pytest.mark.parametrize("pooling", POOLINGS)
def test_keras_save_and_load_round_trip(tmp_path, pooling):
    model = tiny(pooling, norm_first=True)
    ids = batch()
    expected = model(ids)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is TransformerEncoderModel
    assert restored.get_config() == model.get_config()
    assert TransformerEncoderModel.from_config(model.get_config()).get_config() == (
        model.get_config()
    )
    np.testing.assert_allclose(restored(ids), expected, atol=1e-6)


def test_base_preset_parameter_count():
    # 30,000 x 512 embedding (15,360,000) + 6 encoder layers x 3,152,384 (as in the
    # translation model's test) + pooler 512 x 512 + 512 + classifier 512 x 2 + 2.
    model = TransformerEncoderModel.from_preset(
        "base", vocabulary_size=30000, num_classes=2, pooling="first"
    )
    model.build((None, None))
    assert model.num_layers == 6 and model.d_model == 512 and model.dropout == 0.1
    assert model.count_params() == 15_360_000 + 6 * 3_152_384 + 262_656 + 1_026


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    model = tiny("mean", dtype=policy)
    ids = batch()
    logits, weights = model(ids, return_attention_scores=True)
    assert logits.dtype == tf.float32
    assert weights[0].dtype == policy.split("_")[1]
    assert all(w.dtype == "float32" for w in model.weights)
    assert np.isfinite(np.asarray(logits)).all()


def test_remat_gives_the_same_gradients():
    ids = batch()
    labels = np.array([1, 4, 2])
    plain = tiny("mean")
    plain(ids)
    with keras.RematScope(mode="list_of_layers", layer_names=["layer_0", "layer_1"]):
        remat = tiny("mean")
        remat(ids)
    remat.set_weights(plain.get_weights())
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    gradients = []
    for model in (plain, remat):
        with tf.GradientTape() as tape:
            value = loss(labels, model(ids, training=True))
        gradients.append(tape.gradient(value, model.trainable_weights))
    for a, b in zip(*gradients):
        np.testing.assert_allclose(
            tf.convert_to_tensor(a), tf.convert_to_tensor(b), rtol=1e-4, atol=1e-6
        )
    assert any(getattr(layer, "_remat_mode", None) for layer in remat._flatten_layers())


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"pooling": "max"}, r"expected one of \('mean', 'first'\). Received: pooling='max'"),
        ({"num_classes": 0}, "expected a positive integer. Received: num_classes=0"),
        ({"d_model": 30}, "expected a multiple of `num_heads`=4. Received: d_model=30"),
        ({"num_layers": 0}, "Received: num_layers=0"),
    ],
)
def test_invalid_arguments(overrides, message):
    arguments = {"vocabulary_size": V, "num_classes": C, "num_heads": 4, "d_model": 32}
    arguments.update(overrides)
    with pytest.raises(ValueError, match=message):
        TransformerEncoderModel(**arguments)
