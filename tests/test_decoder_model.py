"""The decoder-only language model: causality, padding, save/load, presets, precision, remat."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerDecoderModel

V = 50


def tiny(**overrides):
    return TransformerDecoderModel.from_preset("tiny", vocabulary_size=V, **overrides)


def batch(b=3, t=8):
    rng = np.random.default_rng(0)
    ids = rng.integers(1, V, size=(b, t)).astype("int32")
    ids[:, 0] = 2  # BOS
    ids[1, 5:] = 0
    ids[2, 3:] = 0
    return ids


@pytest.mark.parametrize("norm_first", [False, True])
def test_logits_shape_and_dtype_eager_and_in_tf_function(norm_first):
    model = tiny(norm_first=norm_first)
    ids = batch()
    logits = model(ids)
    assert logits.shape == (3, 8, V) and logits.dtype == tf.float32
    fn = tf.function(model, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_allclose(fn(ids), logits, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_no_look_ahead_leak(norm_first):
    model = tiny(norm_first=norm_first, dropout=0.1)
    ids = batch()
    ids[:, :] = np.where(ids == 0, 7, ids)  # no padding: every position is real
    logits = np.asarray(model(ids, training=False))
    for t in range(ids.shape[1] - 1):
        changed = ids.copy()
        changed[:, t + 1 :] = np.random.randint(4, V, size=changed[:, t + 1 :].shape)
        other = np.asarray(model(changed, training=False))
        np.testing.assert_allclose(other[:, : t + 1], logits[:, : t + 1], atol=1e-6)
        assert not np.allclose(other[:, t + 1 :], logits[:, t + 1 :], atol=1e-6)


def test_padding_invariance():
    model = tiny()
    ids = batch()
    logits = np.asarray(model(ids))
    padded = np.asarray(model(np.pad(ids, ((0, 0), (0, 5)))))
    real = ids != 0
    np.testing.assert_allclose(padded[:, : ids.shape[1]][real], logits[real], atol=1e-5)
    for i in range(len(ids)):  # and each row alone, without the batch's padding
        length = int(real[i].sum())
        np.testing.assert_allclose(model(ids[i : i + 1, :length])[0], logits[i, :length], atol=1e-5)


def test_self_attention_weights_are_causal():
    model = tiny()
    ids = batch()
    logits, weights = model(ids, return_attention_scores=True)
    np.testing.assert_allclose(logits, model(ids), atol=1e-6)
    assert [w.shape for w in weights] == [(3, 4, 8, 8)] * 2
    first = np.asarray(weights[0])
    assert np.triu(np.ones((8, 8)), 1)[None, None].astype(bool).sum() > 0
    assert first[:, :, np.triu_indices(8, 1)[0], np.triu_indices(8, 1)[1]].max() < 1e-7
    assert first[2, :, :, 3:].max() < 1e-7  # row 2 is padding from position 3 on


@pytest.mark.parametrize("tie", [True, False])
def test_keras_save_and_load_round_trip(tmp_path, tie):
    model = tiny(tie_output_embeddings=tie, norm_first=not tie)
    ids = batch()
    expected = model(ids)
    path = str(tmp_path / "lm.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is TransformerDecoderModel
    assert restored.get_config() == model.get_config()
    assert TransformerDecoderModel.from_config(model.get_config()).get_config() == (
        model.get_config()
    )
    np.testing.assert_allclose(restored(ids), expected, atol=1e-6)


def test_parameters_reuse_the_decoder_layers_without_cross_attention():
    # base: 32,000 x 512 tied embedding + 6 x (attention 4 x (512^2 + 512) + FFN
    # 2 x 512 x 2048 + 2048 + 512 + two LayerNorms x 1,024) = 6 x 3,152,384, the
    # encoder layer's count: a decoder block minus its cross-attention.
    model = TransformerDecoderModel.from_preset("base", vocabulary_size=32000)
    model.build((None, None))
    assert model.count_params() == 32000 * 512 + 6 * 3_152_384
    assert not any("cross_attention" in w.path for w in model.weights)
    untied = tiny(tie_output_embeddings=False)
    untied.build((None, None))
    tied = tiny()
    tied.build((None, None))
    assert untied.count_params() == tied.count_params() + 32 * V  # the output matrix


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    model = tiny(dtype=policy)
    ids = batch()
    logits, weights = model(ids, return_attention_scores=True)
    assert logits.dtype == tf.float32
    assert weights[0].dtype == policy.split("_")[1]
    assert all(w.dtype == "float32" for w in model.weights)
    assert np.isfinite(np.asarray(logits)).all()


def test_remat_gives_the_same_gradients():
    ids = batch()
    labels = np.roll(ids, -1, axis=1)
    plain = tiny()
    plain(ids)
    with keras.RematScope(mode="list_of_layers", layer_names=["layer_0", "layer_1"]):
        remat = tiny()
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


def test_cached_decode_step_matches_the_full_model_after_the_prompt():
    model = tiny(norm_first=True)
    ids = batch()
    full = np.asarray(model(ids))
    no_prompt = np.zeros((3, 1), "int32")
    prompt_ids, prompt_mask = model.encode(no_prompt)
    cache, prompt_cache = model.init_decoding_cache(prompt_ids, max_length=ids.shape[1])
    real = ids != 0  # (the cache holds no padding mask: padded positions differ)
    for t in range(ids.shape[1]):
        logits, cache = model.decode_step(ids[:, t : t + 1], prompt_mask, cache, prompt_cache, t)
        np.testing.assert_allclose(
            np.asarray(logits)[real[:, t], 0], full[real[:, t], t], atol=1e-5
        )


def test_decode_step_forces_the_prompt_tokens():
    model = tiny()
    model.build((None, None))
    prompts = np.array([[5, 6, 7], [8, 0, 0]], "int32")
    prompt_ids, prompt_mask = model.encode(prompts)
    cache, prompt_cache = model.init_decoding_cache(prompt_ids, max_length=6)
    sequence = np.array([[2, 5, 6, 7, 9, 9], [2, 8, 9, 9, 9, 9]], "int32")
    for t in range(6):
        logits, cache = model.decode_step(
            sequence[:, t : t + 1], prompt_mask, cache, prompt_cache, t
        )
        logits = np.asarray(logits)[:, 0]
        for row, length in enumerate((3, 1)):
            if t < length:  # the next token is the prompt's: certain
                assert logits[row].argmax() == prompts[row, t]
                assert np.isneginf(np.delete(logits[row], prompts[row, t])).all()
            else:
                assert np.isfinite(logits[row]).all()
