"""The subclassed Transformer: masks, save/load, presets, precision, decoding pieces."""

import dataclasses
import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig

SV, TV = 60, 50


def tiny(**overrides):
    return Transformer.from_preset("tiny", source_vocab_size=SV, target_vocab_size=TV, **overrides)


def batch(b=3, s=9, t=7, pad_source=True):
    rng = np.random.default_rng(0)
    source = rng.integers(1, SV, size=(b, s)).astype("int32")
    target = rng.integers(1, TV, size=(b, t)).astype("int32")
    if pad_source:
        source[1, 5:] = 0
        source[2, 2:] = 0
    return source, target


@pytest.mark.parametrize("norm_first", [False, True])
def test_logits_shape_and_dtype_eager_and_in_tf_function(norm_first):
    model = tiny(norm_first=norm_first)
    source, target = batch()
    logits = model((source, target))
    assert logits.shape == (3, 7, TV) and logits.dtype == tf.float32

    spec = tf.TensorSpec([None, None], tf.int32)
    fn = tf.function(lambda s, t: model((s, t)), input_signature=[spec, spec])
    np.testing.assert_allclose(fn(source, target), logits, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_no_look_ahead_leak(norm_first):
    model = tiny(norm_first=norm_first, dropout=0.1)
    source, target = batch()
    logits = np.asarray(model((source, target), training=False))
    for t in range(target.shape[1] - 1):
        changed = target.copy()
        changed[:, t + 1 :] = np.random.randint(1, TV, size=changed[:, t + 1 :].shape)
        other = np.asarray(model((source, changed), training=False))
        np.testing.assert_allclose(other[:, : t + 1], logits[:, : t + 1], atol=1e-6)
        assert not np.allclose(other[:, t + 1 :], logits[:, t + 1 :], atol=1e-6)


def test_padding_invariance_of_source_and_target():
    model = tiny()
    source, target = batch()
    logits = np.asarray(model((source, target)))

    padded_source = np.pad(source, ((0, 0), (0, 6)))
    np.testing.assert_allclose(model((padded_source, target)), logits, atol=1e-5)

    padded_target = np.pad(target, ((0, 0), (0, 4)))
    np.testing.assert_allclose(
        np.asarray(model((source, padded_target)))[:, : target.shape[1]], logits, atol=1e-5
    )
    # And the padding is not ignored by accident: real tokens do change the output.
    changed = source.copy()
    changed[0, 0] = (changed[0, 0] % (SV - 1)) + 1
    assert not np.allclose(model((changed, target))[0], logits[0], atol=1e-5)


def test_attention_weights_on_request():
    model = tiny()
    source, target = batch()
    logits, attention = model((source, target), return_attention_scores=True)
    np.testing.assert_allclose(logits, model((source, target)), atol=1e-6)
    assert [w.shape for w in attention["encoder_self_attention"]] == [(3, 4, 9, 9)] * 2
    assert [w.shape for w in attention["decoder_self_attention"]] == [(3, 4, 7, 7)] * 2
    cross = attention["cross_attention"]
    assert [w.shape for w in cross] == [(3, 4, 7, 9)] * 2
    cross = np.asarray(cross[0])
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert cross[2, :, :, 2:].max() < 1e-7  # source row 2 is padding from position 2 on


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True, "tie_output_embeddings": False}])
def test_keras_save_and_load_round_trip(tmp_path, overrides):
    model = tiny(**overrides)
    source, target = batch()
    expected = model((source, target))
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, Transformer)
    assert restored.get_config() == model.get_config()
    np.testing.assert_allclose(restored((source, target)), expected, atol=1e-6)


def test_config_round_trip_and_dataclass_match_the_constructor():
    model = tiny(share_embeddings=False, attention_dropout=0.1)
    config = model.get_config()
    assert Transformer.from_config(config).get_config() == config
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}

    params = set(inspect.signature(Transformer.__init__).parameters) - {"self", "kwargs"}
    # Every argument is the architecture's, but the record of the training encoding.
    assert fields == params - {"source_eos"}
    rebuilt = Transformer.from_transformer_config(model.transformer_config(), name=model.name)
    assert rebuilt.get_config() == config


def test_shared_and_tied_embeddings_use_one_matrix():
    model = Transformer.from_preset(
        "tiny", source_vocab_size=SV, target_vocab_size=SV, share_embeddings=True
    )
    source, target = batch()
    model((source, target))
    assert model.encoder.embedding is model.decoder.embedding
    untied = tiny(share_embeddings=False, tie_output_embeddings=True)
    untied((source, target))
    # Sharing saves one SV x d_model matrix; tying has no separate output matrix.
    assert model.count_params() == untied.count_params() - SV * 32 + (SV - TV) * 32
    assert "reverse_embeddings" not in [w.path.split("/")[-1] for w in model.weights]


def test_base_parameter_count_with_shared_37k_vocabulary():
    # 63,082,496 = 37,000 x 512 shared, tied embeddings (18,944,000)
    #   + 6 encoder layers x 3,152,384 (attention 4 x (512^2 + 512), FFN 2 x 512 x 2048 +
    #     2048 + 512, two LayerNorms x 1,024)
    #   + 6 decoder layers x 4,204,032 (two attentions, FFN, three LayerNorms).
    # The paper's Table 3 rounds this to 65M.
    model = Transformer.from_preset(
        "base", source_vocab_size=37000, target_vocab_size=37000, share_embeddings=True
    )
    model.build(((None, None), (None, None)))
    assert model.count_params() == 63_082_496


@pytest.mark.parametrize(
    "policy, compute_dtype",
    [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")],
)
def test_mixed_precision_policies(policy, compute_dtype):
    keras.config.set_dtype_policy(policy)
    model = tiny()
    source, target = batch()
    logits, attention = model((source, target), return_attention_scores=True)
    assert logits.dtype == tf.float32  # logits stay float32 for a stable softmax/loss
    assert attention["cross_attention"][0].dtype == compute_dtype
    hidden = model.decoder(target, model.encoder(source))
    assert hidden.dtype == compute_dtype
    assert all(w.dtype == "float32" for w in model.weights)
    assert np.isfinite(np.asarray(logits)).all()


def test_every_matmul_runs_in_the_compute_dtype_under_mixed_bfloat16():
    # The tied output projection included: the float32 table (Keras's Embedding does not
    # autocast) once promoted it to a float32 matmul inside the model's call.
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = tiny()  # output projection tied to the target embedding
    source, target = batch()
    model((source, target))
    forward = tf.function(lambda s, t: model((s, t)), autograph=False)
    graph = forward.get_concrete_function(tf.constant(source), tf.constant(target)).graph
    matmuls = {n.name: n.attr["T"].type for n in graph.as_graph_def().node if "MatMul" in n.op}
    assert any("token_embedding" in name for name in matmuls)
    bf16 = tf.bfloat16.as_datatype_enum
    assert sorted(name for name, dtype in matmuls.items() if dtype != bf16) == []


def test_cached_decode_step_matches_the_full_decoder():
    model = tiny(norm_first=True)
    source, target = batch()
    full = np.asarray(model((source, target)))
    encoded, source_mask = model.encode(source)
    cache, cross = model.init_decoding_cache(encoded, max_length=target.shape[1])
    for t in range(target.shape[1]):
        logits, cache = model.decode_step(target[:, t : t + 1], source_mask, cache, cross, t)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 30}, "expected a multiple of `num_heads`=4. Received: d_model=30"),
        ({"num_heads": 0}, "expected a positive integer. Received: num_heads=0"),
        ({"d_ff": -1}, "Received: d_ff=-1"),
        ({"num_encoder_layers": 0}, "num_encoder_layers=0"),
        ({"dropout": 1.0}, r"expected a float in \[0, 1\). Received: dropout=1.0"),
        ({"attention_dropout": -0.5}, "attention_dropout=-0.5"),
        ({"ffn_dropout": 1.5}, r"expected a float in \[0, 1\). Received: ffn_dropout=1.5"),
        ({"share_embeddings": True}, "source_vocab_size == target_vocab_size"),
        ({"max_length": 0}, "max_length=0"),
    ],
)
def test_invalid_configurations_raise_value_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_unknown_preset_and_config_keys():
    with pytest.raises(ValueError, match="expected one of .*Received: preset='huge'"):
        Transformer.from_preset("huge", source_vocab_size=SV, target_vocab_size=TV)
    with pytest.raises(ValueError, match="unknown `TransformerConfig` keys"):
        TransformerConfig.from_dict({"source_vocab_size": 1, "target_vocab_size": 1, "n": 2})


def test_too_long_input_is_a_clear_error():
    model = tiny()  # max_length=64
    with pytest.raises(ValueError, match="longer than `max_length`=64"):
        model((np.ones((1, 65), "int32"), np.ones((1, 3), "int32")))


def test_an_empty_source_gives_padding_independent_outputs():
    model = tiny()
    target = batch()[1][:1]
    empty = np.zeros((1, 4), "int32")
    longer = np.zeros((1, 11), "int32")
    np.testing.assert_allclose(model((empty, target)), model((longer, target)), atol=1e-5)


def test_fit_builds_an_unbuilt_model_inside_its_graph():
    # Regression: the positional table must not be a tensor of the graph that built it.
    model = tiny()
    source, target = batch()
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit((source, target), target, epochs=1, batch_size=3, verbose=0)
    assert np.isfinite(history.history["loss"][0])
