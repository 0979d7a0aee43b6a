"""Shapes, dtypes, configs and numerics of every layer."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import layers, masks
from keras_transformer.layers.positional_encoding import sinusoidal_table

B, S, T, D, H, F, V = 2, 7, 5, 16, 4, 32, 50


def _source_ids():
    ids = np.random.randint(1, V, size=(B, S)).astype("int32")
    ids[1, 4:] = 0  # padding
    return ids


# (layer factory, call inputs as a list of positional args, expected output shape)
CASES = {
    "positional_encoding": (
        lambda: layers.PositionalEncoding(max_length=32),
        lambda: [np.zeros((B, S, D), "float32")],
        (1, S, D),
    ),
    "embedding": (
        lambda: layers.TransformerEmbedding(V, D, max_length=32, dropout=0.1),
        lambda: [_source_ids()],
        (B, S, D),
    ),
    "multi_head_attention": (
        lambda: layers.MultiHeadAttention(num_heads=H, key_dim=D // H, dropout=0.1),
        lambda: [np.random.rand(B, T, D).astype("float32"), np.random.rand(B, S, D)],
        (B, T, D),
    ),
    "feed_forward": (
        lambda: layers.FeedForward(d_ff=F, dropout=0.1),
        lambda: [np.random.rand(B, S, D).astype("float32")],
        (B, S, D),
    ),
    "encoder_layer": (
        lambda: layers.EncoderLayer(num_heads=H, d_ff=F, dropout=0.1),
        lambda: [np.random.rand(B, S, D).astype("float32")],
        (B, S, D),
    ),
    "decoder_layer": (
        lambda: layers.DecoderLayer(num_heads=H, d_ff=F, dropout=0.1, norm_first=True),
        lambda: [np.random.rand(B, T, D).astype("float32"), np.random.rand(B, S, D)],
        (B, T, D),
    ),
    "encoder": (
        lambda: layers.Encoder(V, num_layers=2, d_model=D, num_heads=H, d_ff=F),
        lambda: [_source_ids()],
        (B, S, D),
    ),
    "decoder": (
        lambda: layers.Decoder(
            V, num_layers=2, d_model=D, num_heads=H, d_ff=F, norm_first=True, tie_weights=False
        ),
        lambda: [_source_ids()[:, :T], np.random.rand(B, S, D).astype("float32")],
        (B, T, D),
    ),
    "decoder_layer_without_cross_attention": (
        lambda: layers.DecoderLayer(num_heads=H, d_ff=F, use_cross_attention=False),
        lambda: [np.random.rand(B, T, D).astype("float32")],
        (B, T, D),
    ),
    "decoder_without_cross_attention": (
        lambda: layers.Decoder(
            V, num_layers=2, d_model=D, num_heads=H, d_ff=F, use_cross_attention=False
        ),
        lambda: [_source_ids()[:, :T]],
        (B, T, D),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapes_and_dtypes_eager_and_in_tf_function(name):
    factory, make_inputs, expected_shape = CASES[name]
    layer = factory()
    inputs = [tf.convert_to_tensor(x) for x in make_inputs()]
    eager = layer(*inputs)
    assert tuple(eager.shape) == expected_shape
    assert eager.dtype == tf.float32

    # Dynamic batch and length: the graph is traced with None dimensions.
    specs = [
        tf.TensorSpec([None] * len(x.shape[:-1]) + list(x.shape[-1:]), x.dtype)
        if x.dtype.is_floating
        else tf.TensorSpec([None, None], x.dtype)
        for x in inputs
    ]
    graph_fn = tf.function(lambda *args: layer(*args), input_signature=specs)
    traced = graph_fn(*inputs)
    assert traced.dtype == tf.float32
    np.testing.assert_allclose(traced, eager, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip_rebuilds_an_identical_layer(name):
    factory, make_inputs, _ = CASES[name]
    layer = factory()
    inputs = make_inputs()
    expected = layer(*inputs)
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    clone(*inputs)  # build
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(*inputs), expected, atol=1e-6)
    # Also through Keras' generic (de)serialization, by registered name.
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)


def test_positional_encoding_matches_the_paper_formula():
    table = sinusoidal_table(50, 8)
    pos, i = 13, 2
    assert table[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    encoded = layers.PositionalEncoding(max_length=50)(np.zeros((1, 20, 8)), start_index=3)
    np.testing.assert_allclose(encoded[0], table[3:23], atol=1e-7)


def test_positional_encoding_rejects_too_long_sequences():
    layer = layers.PositionalEncoding(max_length=8)
    with pytest.raises(ValueError, match="longer than `max_length`=8"):
        layer(np.zeros((1, 9, 4)))

    graph_fn = tf.function(
        lambda x: layer(x), input_signature=[tf.TensorSpec([None, None, 4], tf.float32)]
    )
    graph_fn(tf.zeros((1, 8, 4)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than `max_length`=8"):
        graph_fn(tf.zeros((1, 9, 4)))


def test_embedding_is_scaled_by_sqrt_d_model():
    layer = layers.TransformerEmbedding(V, D, max_length=16)
    ids = _source_ids()
    out = np.asarray(layer(ids))
    table = np.asarray(layer.token_embedding.embeddings)
    expected = table[ids] * np.sqrt(D) + sinusoidal_table(16, D)[:S]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def _copy_into_keras_mha(ours, theirs):
    """Our Dense kernels (D, H*K) -> Keras' EinsumDense kernels (D, H, K) / (H, K, D)."""
    weights = []
    for dense in (ours.query_dense, ours.key_dense, ours.value_dense):
        kernel, bias = dense.get_weights()
        weights += [kernel.reshape(D, H, -1), bias.reshape(H, -1)]
    kernel, bias = ours.output_dense.get_weights()
    weights += [kernel.reshape(H, -1, D), bias]
    theirs.set_weights(weights)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_matches_keras_multi_head_attention(masked):
    ours = layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    theirs = keras.layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    query = np.random.rand(B, T, D).astype("float32")
    value = np.random.rand(B, S, D).astype("float32")
    ours(query, value)
    theirs(query, value)
    _copy_into_keras_mha(ours, theirs)
    mask = None
    if masked:
        key_padding = masks.key_padding_attention_mask(masks.padding_mask(_source_ids()))
        mask = np.asarray(masks.merge_masks(key_padding, masks.causal_mask(T, S)))
        mask = np.broadcast_to(mask, (B, T, S))
    out, weights = ours(query, value, attention_mask=mask, return_attention_scores=True)
    ref, ref_weights = theirs(query, value, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-5)
    if masked:
        assert (
            float(np.max(np.asarray(weights)[np.broadcast_to(~mask[:, None], weights.shape)]))
            < 1e-7
        )


def test_attention_reads_a_two_dimensional_mask_as_keras_does():
    """A (T, S) mask holds for every batch row (broadcastable to (B, T, S)), as in Keras'
    MultiHeadAttention; it was read with T on the heads axis (wrong weights, or an error).
    A mask of another rank is refused."""
    ours = layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    theirs = keras.layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    x = np.random.rand(B, T, D).astype("float32")
    ours(x, x)
    theirs(x, x)
    _copy_into_keras_mha(ours, theirs)
    causal = np.tril(np.ones((T, T), bool))
    expected = theirs(x, x, attention_mask=causal)
    np.testing.assert_allclose(ours(x, x, attention_mask=causal), expected, atol=1e-5)
    np.testing.assert_allclose(ours(x, x, attention_mask=causal[None]), expected, atol=1e-5)
    for shape in ((T,), (B, 1, T, T)):
        with pytest.raises(ValueError, match=r"expected a mask of rank 3, \(B, T, S\), or 2"):
            ours(x, x, attention_mask=np.ones(shape, bool))


def test_attention_cache_gives_the_full_sequence_result():
    mha = layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    x = np.random.rand(B, T, D).astype("float32")
    full = np.asarray(mha(x, x, attention_mask=masks.causal_mask(T)))
    cache = (np.zeros((B, H, T, D // H), "float32"),) * 2  # (keys, values), head-major
    for t in range(T):
        step, cache = mha(
            x[:, t : t + 1],
            x[:, t : t + 1],
            attention_mask=masks.causal_mask(1, T, offset=t),
            cache=cache,
            cache_update_index=t,
        )
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-5)
    # The cache holds the projected keys and values of every position, heads first.
    keys, values = mha.project_key_value(x, x)
    np.testing.assert_allclose(cache[0], keys, atol=1e-6)
    np.testing.assert_allclose(cache[1], values, atol=1e-6)


@pytest.mark.parametrize(
    "factory, message",
    [
        (lambda: layers.MultiHeadAttention(num_heads=0, key_dim=4), "num_heads=0"),
        (lambda: layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=1.0), "dropout=1.0"),
        (lambda: layers.FeedForward(d_ff=-3), "d_ff=-3"),
        (lambda: layers.EncoderLayer(num_heads=2, d_ff=8, dropout=-0.1), "dropout=-0.1"),
        (lambda: layers.Encoder(10, d_model=10, num_heads=3), "expected a multiple"),
        (lambda: layers.PositionalEncoding(max_length=0), "max_length=0"),
        # Keras' Dropout takes 1.0; ours divided by zero when it trained.
        (lambda: layers.Dropout(1.0), r"argument `rate`, expected a float in \[0, 1\)"),
    ],
)
def test_invalid_arguments_raise_value_error_naming_them(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_encoder_layer_rejects_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="Received: d_model=10"):
        layers.EncoderLayer(num_heads=3, d_ff=8)(np.zeros((1, 2, 10), "float32"))


def test_decoder_layer_without_cross_attention_is_the_same_block_minus_one_sublayer():
    """Same sublayers, names and numbers as the full block when cross-attention is removed
    from its computation; the encoder-decoder block keeps every weight it had."""
    x = np.random.rand(B, T, D).astype("float32")
    full = layers.DecoderLayer(num_heads=H, d_ff=F)
    full(x, np.random.rand(B, S, D).astype("float32"))
    causal = layers.DecoderLayer(num_heads=H, d_ff=F, use_cross_attention=False)
    causal(x)
    full_paths = {w.path.split("/", 1)[1] for w in full.weights}
    causal_paths = {w.path.split("/", 1)[1] for w in causal.weights}
    assert causal_paths == {p for p in full_paths if not p.startswith("cross_attention")}
    assert any(p.startswith("cross_attention") for p in full_paths)
    by_path = {w.path.split("/", 1)[1]: w for w in full.weights}
    for weight in causal.weights:
        weight.assign(by_path[weight.path.split("/", 1)[1]])
    # The causal block is the full block's self-attention and feed-forward: recompute it
    # from the full block's sublayers.
    h, _ = full._residual(
        "self_attention",
        tf.convert_to_tensor(x),
        lambda h: full.self_attention(h, h, attention_mask=masks.causal_mask(T)),
    )
    h, _ = full._residual("feed_forward", h, full.feed_forward)
    np.testing.assert_allclose(causal(x), h, atol=1e-6)


def test_decoder_without_cross_attention_refuses_encoder_inputs():
    decoder = layers.Decoder(
        V, num_layers=1, d_model=D, num_heads=H, d_ff=F, use_cross_attention=False
    )
    ids = _source_ids()[:, :T]
    with pytest.raises(ValueError, match=r"without cross-attention.*\['encoder_output'\]"):
        decoder(ids, np.random.rand(B, S, D).astype("float32"))
    with pytest.raises(ValueError, match="no encoder to attend"):
        decoder.compute_cross_attention_cache(np.random.rand(B, S, D).astype("float32"))
    layer = layers.DecoderLayer(num_heads=H, d_ff=F, use_cross_attention=False)
    with pytest.raises(ValueError, match=r"\['encoder_padding_mask'\]"):
        layer(np.random.rand(B, T, D).astype("float32"), encoder_padding_mask=np.ones((B, S)))
