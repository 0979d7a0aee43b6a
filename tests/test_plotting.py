"""`keras_transformer.plotting`: each figure draws what it claims, readably.

Positional encoding, masks and attention here (training curves: `test_training_curves.py`).
Every test saves its figure under `build/test-plots/` (see `plot_files.py`) to be looked at.
"""

import configparser
import os
import sys

import keras
import numpy as np
import pytest
from multi30k_files import read_lines
from plot_files import (
    ROOT,
    assert_readable,
    colorbar_axes,
    data_axes,
    heat_maps,
    save_png,
    visible_tick_labels,
)

from keras_transformer import Transformer
from keras_transformer.layers.positional_encoding import sinusoidal_table
from keras_transformer.plotting import (
    PLOT_EXTRA,
    plot_attention,
    plot_attention_heads,
    plot_masks,
    plot_positional_curves,
    plot_positional_heatmap,
    plot_translation_attention,
)
from keras_transformer.plotting.attention import BOS_PIECE

# Positional encoding.


def test_positional_curves_are_the_sinusoids_of_the_formula():
    figure = plot_positional_curves(100, 128, dimensions=(4, 5, 32))
    save_png(figure, "positional_curves")
    (ax,) = figure.axes
    assert ax.get_xlabel() == "position" and ax.get_ylabel() == "PE(position, dimension)"
    assert "d_model=128" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "dimension 4 (sin, wavelength 8)",
        "dimension 5 (cos, wavelength 8)",
        "dimension 32 (sin, wavelength 63)",
    ]
    lines = ax.get_lines()
    assert len(lines) == 3
    positions = np.arange(100)
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same angle).
    np.testing.assert_allclose(
        lines[0].get_ydata(), np.sin(positions / 10000 ** (4 / 128)), atol=1e-6
    )
    np.testing.assert_allclose(
        lines[1].get_ydata(), np.cos(positions / 10000 ** (4 / 128)), atol=1e-6
    )
    np.testing.assert_allclose(
        lines[2].get_ydata(), np.sin(positions / 10000 ** (32 / 128)), atol=1e-6
    )
    np.testing.assert_array_equal(lines[0].get_xdata(), positions)
    assert_readable(figure, [ax])

    # The default dimensions adapt to d_model; a dimension out of range is refused.
    default = plot_positional_curves(50, 32)
    assert len(default.axes[0].get_lines()) == 4  # 4, 5, 8, 12
    with pytest.raises(ValueError, match="dimensions"):
        plot_positional_curves(10, 16, dimensions=(16,))


def test_positional_heatmap_is_the_table_with_a_colorbar():
    figure = plot_positional_heatmap(100, 128)
    save_png(figure, "positional_heatmap")
    [(ax, image)] = heat_maps(figure)
    np.testing.assert_array_equal(image, sinusoidal_table(100, 128))
    assert image.shape == (100, 128)
    assert image[7, 10] == pytest.approx(np.sin(7 / 10000 ** (10 / 128)), abs=1e-6)
    assert image[7, 11] == pytest.approx(np.cos(7 / 10000 ** (10 / 128)), abs=1e-6)
    assert ax.get_xlabel().startswith("dimension") and ax.get_ylabel() == "position"
    [bar] = colorbar_axes(figure)
    assert bar.get_ylabel() == "PE(position, i)"
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    assert_readable(figure, [ax])


# Masks.


def test_masks_of_a_padded_batch():
    ids = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9, 3]])
    pieces = [["▁Ein", "▁Hund", "▁läuft", ".", "</s>"], ["▁Kinder", ".", "</s>"], list("abcdefg")]
    figure = plot_masks(ids, pieces=pieces)
    save_png(figure, "masks")
    images = heat_maps(figure)
    assert len(images) == 2 + 3
    (padding_ax, padding), (look_ahead_ax, look_ahead) = images[:2]
    np.testing.assert_array_equal(padding, ids != 0)
    assert padding[0, 4] == 1 and padding[0, 5] == 0 and padding[1, 2] == 1 and padding[1, 3] == 0
    np.testing.assert_array_equal(look_ahead, np.tril(np.ones((7, 7))))
    assert padding_ax.get_title() == "padding mask (3, 7)"
    assert look_ahead_ax.get_xlabel() == "key position"
    for b, (ax, combined) in enumerate(images[2:]):
        expected = np.tril(np.ones((7, 7), bool)) & (ids[b] != 0)[None, :]
        np.testing.assert_array_equal(combined, expected)
        names = pieces[b] + ["<pad>"] * (7 - len(pieces[b]))
        assert [t.get_text() for t in ax.get_xticklabels()] == names
        assert [t.get_text() for t in ax.get_yticklabels()] == names
    # Query 1 of example 1 may attend keys 0 and 1, not 2 (the future) nor 3 (padding).
    assert list(images[3][1][1, :4]) == [1, 1, 0, 0]
    bars = colorbar_axes(figure)
    assert len(bars) == 2
    assert [t.get_text() for t in bars[0].get_yticklabels()] == ["blocked", "may attend"]
    assert_readable(figure, data_axes(figure))


def test_masks_for_30_positions_stay_readable():
    ids = np.zeros((2, 30), np.int32)
    ids[0, :30], ids[1, :17] = 7, 8
    pieces = [[f"▁piece{i}" for i in range(30)], [f"▁wort{i}" for i in range(17)]]
    figure = plot_masks(ids, pieces=pieces)
    save_png(figure, "masks_30_positions")
    assert_readable(figure, data_axes(figure))


# Attention.


def _random_attention(shape, seed=0):
    weights = np.random.default_rng(seed).random(shape) ** 4
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)


def test_attention_heads_of_30_pieces_are_readable():
    source = [f"▁Wort{i}" if i % 4 else f"▁Männer{i}" for i in range(30)]
    target = [f"▁word{i}" for i in range(30)]
    weights = _random_attention((2, 4, 30, 30))
    figure = plot_attention_heads(weights, target, source, "Cross-attention", "emitted", "source")
    save_png(figure, "attention_heads_30_pieces")
    images = heat_maps(figure)
    assert len(images) == 8
    for (ax, image), (layer, head) in zip(images, np.ndindex(2, 4)):
        assert ax.get_title() == f"layer {layer + 1}, head {head + 1}"
        np.testing.assert_allclose(image, weights[layer, head])
        assert ax.images[0].get_clim() == (0.0, pytest.approx(weights.max()))
    bottom_left = images[4][0]
    assert [t.get_text() for t in visible_tick_labels(bottom_left, "x")] == source
    assert [t.get_text() for t in visible_tick_labels(bottom_left, "y")] == target
    # Inner panels show no pieces: the bottom row and left column label the grid.
    assert visible_tick_labels(images[1][0], "x") == []
    assert visible_tick_labels(images[1][0], "y") == []
    assert figure.get_suptitle() == "Cross-attention"
    assert figure.get_supxlabel() == "source" and figure.get_supylabel() == "emitted"
    [bar] = colorbar_axes(figure)
    assert bar.get_ylabel() == "attention weight"
    assert_readable(figure, data_axes(figure))

    with pytest.raises(ValueError, match="expected shape"):
        plot_attention_heads(weights, target[:-1], source)


def test_plot_attention_draws_one_matrix():
    source, target = ["▁Ein", "▁Hund", "</s>"], ["▁A", "▁dog", "</s>", "x"]
    weights = _random_attention((4, 3))
    figure = plot_attention(source, target, weights, title="mean of the heads")
    save_png(figure, "attention_one_matrix")
    [(ax, image)] = heat_maps(figure)
    np.testing.assert_allclose(image, weights)
    assert [t.get_text() for t in ax.get_xticklabels()] == source
    assert [t.get_text() for t in ax.get_yticklabels()] == target
    assert ax.get_xlabel() == "source (key)" and ax.get_title() == "mean of the heads"
    assert len(colorbar_axes(figure)) == 1
    with pytest.raises(ValueError, match="expected shape"):
        plot_attention(source, target, weights.T)


@pytest.fixture(scope="module")
def tokenizer(multi30k_dir):
    from keras_transformer.tokenization import train_sentencepiece

    texts = read_lines("train.de.gz", 400, multi30k_dir) + read_lines(
        "train.en.gz", 400, multi30k_dir
    )
    return train_sentencepiece(texts, vocab_size=300, byte_fallback=False, seed=0)


def test_translation_attention_figures_of_a_real_sentence(tokenizer, multi30k_dir):
    from keras_transformer.plotting import translation_attention
    from keras_transformer.predictors import Translator

    keras.utils.set_random_seed(3)
    model = Transformer.from_preset(
        "tiny", source_vocab_size=300, target_vocab_size=300, share_embeddings=True
    )
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))  # build
    translator = Translator(
        model, tokenizer, tokenizer, beam_size=1, max_length=30, jit_compile=False
    )
    # A Multi30k sentence of 29 pieces + EOS: the 30-piece case the figures must handle.
    sentence = next(
        s
        for s in read_lines("val.de.gz", 200, multi30k_dir)
        if len(tokenizer.tokenize([s])[0]) == 29
    )
    source, target, weights = translation_attention(translator, sentence)
    assert len(source) == 30 and source[-1] == "</s>"
    # The BOS piece the figure puts first among the decoder inputs is the tokenizer's.
    assert BOS_PIECE == tokenizer.id_to_piece([tokenizer.bos_id]).numpy()[0].decode()

    figures = plot_translation_attention(source, target, weights)
    assert list(figures) == ["encoder_self_attention", "decoder_self_attention", "cross_attention"]
    columns = {
        "encoder_self_attention": source,
        "decoder_self_attention": [BOS_PIECE, *target[:-1]],
        "cross_attention": source,
    }
    rows = {
        "encoder_self_attention": source,
        "decoder_self_attention": target,
        "cross_attention": target,
    }
    for kind, figure in figures.items():
        save_png(figure, f"translation_{kind}")
        images = heat_maps(figure)
        assert len(images) == model.num_decoder_layers * model.num_heads
        bottom_left = images[-model.num_heads][0]
        assert [t.get_text() for t in visible_tick_labels(bottom_left, "x")] == columns[kind]
        assert [t.get_text() for t in visible_tick_labels(bottom_left, "y")] == rows[kind]
        for (_, image), (layer, head) in zip(images, np.ndindex(*weights[kind].shape[:2])):
            np.testing.assert_allclose(image, weights[kind][layer, head])
            np.testing.assert_allclose(image.sum(-1), 1.0, atol=1e-5)  # rows are distributions
        assert_readable(figure, data_axes(figure))
    # Decoder self-attention is causal: nothing above the diagonal.
    decoder = heat_maps(figures["decoder_self_attention"])[0][1]
    assert np.all(np.triu(decoder, k=1) == 0.0)


# Packaging.


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=rf"keras-transformer-nmt\[{PLOT_EXTRA}\]"):
        plot_positional_heatmap(10, 8)


def test_matplotlib_is_in_the_plot_test_and_dev_extras():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    extras = {
        name: set(value.split())
        for name, value in config["options.extras_require"].items()
        if name in ("plot", "test", "dev")
    }
    (matplotlib,) = extras[PLOT_EXTRA]
    assert matplotlib.startswith("matplotlib")
    assert matplotlib in extras["test"]
    assert extras["test"] <= extras["dev"]  # CI installs dev, the README's test command test
