"""Figures of the architecture's fixed parts: positional encodings and attention masks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from keras_transformer.plotting._figure import label_axis, new_figure, panel_inches

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_positional_curves(
    max_length: int = 100, d_model: int = 128, dimensions: Sequence[int] | None = None
) -> Figure:
    """The sinusoidal positional encoding of chosen dimensions over positions.

    Args:
        max_length: positions 0..max_length-1 on the x axis.
        d_model: the model size (sets the wavelengths).
        dimensions: the dimensions drawn (even ones are sines, odd ones cosines); by
            default a sine/cosine pair (4, 5) and two slower sines, `d_model / 4` and
            `3 d_model / 8` (32 and 48 for d_model=128).

    Returns:
        A `Figure` with one line per dimension, `PE(pos, i)` against `pos`; the legend
        gives each one's wavelength, `2 pi 10000^(2 floor(i / 2) / d_model)` positions.

    Example:
    >>> figure = plot_positional_curves(100, 128, (4, 32))
    >>> [line.get_label() for line in figure.axes[0].get_lines()]
    ['dimension 4 (sin, wavelength 8)', 'dimension 32 (sin, wavelength 63)']
    """
    from keras_transformer.layers.positional_encoding import sinusoidal_table

    if dimensions is None:
        candidates = (4, 5, d_model // 8 * 2, 3 * d_model // 16 * 2)
        dimensions = list(dict.fromkeys(d for d in candidates if d < d_model)) or [0]
    dimensions = list(dimensions)
    if not dimensions or not all(0 <= int(d) < d_model for d in dimensions):
        raise ValueError(
            "Received an invalid value for argument `dimensions`, expected dimensions in "
            f"[0, d_model={d_model}). Received: dimensions={dimensions}"
        )
    table = sinusoidal_table(max_length, d_model)  # (L, D)
    figure = new_figure(10.0, 4.0)
    ax = figure.subplots()
    for d in dimensions:
        kind = "sin" if d % 2 == 0 else "cos"
        wavelength = 2 * np.pi * 10000.0 ** ((d - d % 2) / d_model)
        label = f"dimension {d} ({kind}, wavelength {wavelength:.0f})"
        ax.plot(np.arange(max_length), table[:, d], label=label)
    ax.set_xlabel("position")
    ax.set_ylabel("PE(position, dimension)")
    ax.set_title(f"Sinusoidal positional encoding (d_model={d_model})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_xlim(0, max_length - 1)
    return figure


def plot_positional_heatmap(max_length: int = 100, d_model: int = 128) -> Figure:
    """The whole positional-encoding table as a position x dimension heat map.

    Args:
        max_length: the positions (rows).
        d_model: the dimensions (columns).

    Returns:
        A `Figure` whose image is `sinusoidal_table(max_length, d_model)`, with a colour bar.

    Example:
    >>> figure = plot_positional_heatmap(50, 64)
    >>> figure.axes[0].images[0].get_array().shape
    (50, 64)
    """
    from keras_transformer.layers.positional_encoding import sinusoidal_table

    table = sinusoidal_table(max_length, d_model)
    figure = new_figure(8.0, 5.0)
    ax = figure.subplots()
    image = ax.imshow(table, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto")
    ax.set_xlabel("dimension i (even: sin, odd: cos)")
    ax.set_ylabel("position")
    ax.set_title(f"Positional encoding table ({max_length} positions x d_model={d_model})")
    figure.colorbar(image, ax=ax, label="PE(position, i)")
    return figure


# Masks.


def _mask_image(ax, mask: np.ndarray, cmap):
    return ax.imshow(mask.astype(np.float32), cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal")


def plot_masks(
    token_ids: Any,
    pad_id: int = 0,
    pieces: Sequence[Sequence[str]] | None = None,
    max_examples: int = 4,
) -> Figure:
    """The padding, look-ahead and combined masks of a padded batch (True = may attend).

    Top: the padding mask (B, L) and the look-ahead mask (L, L); bottom: for each example
    (the first `max_examples`), the decoder self-attention mask, look-ahead AND key padding
    (`masks.self_attention_mask(padding, causal=True)`).

    Args:
        token_ids: int array (B, L), padded with `pad_id`.
        pad_id: the padding id.
        pieces: optional token names per example, labelling the combined masks' axes
            (padding positions are labelled `<pad>`).
        max_examples: the most combined masks drawn.

    Returns:
        A `Figure`; blocked cells are light, allowed ones dark, with a colour bar.

    Example:
    >>> figure = plot_masks([[5, 6, 7, 0], [8, 9, 0, 0]])
    >>> figure.axes[0].images[0].get_array().tolist()  # the padding mask
    [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    """
    from keras import ops

    from keras_transformer import masks

    ids = np.asarray(token_ids)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(
            "Received an invalid value for argument `token_ids`, expected a non-empty (B, L) "
            f"array. Received: shape={ids.shape}"
        )
    padding = ops.convert_to_numpy(masks.padding_mask(ids, pad_id))  # (B, L)
    batch, length = ids.shape
    look_ahead = ops.convert_to_numpy(masks.causal_mask(length))[0]  # (L, L)
    combined = ops.convert_to_numpy(masks.self_attention_mask(padding, causal=True))  # (B, L, L)
    shown = min(batch, max_examples)

    labels = [[str(i) for i in range(length)] for _ in range(shown)]
    if pieces is not None:
        labels = [
            list(pieces[b])[:length] + ["<pad>"] * (length - len(pieces[b])) for b in range(shown)
        ]
    label_inches = 0.08 * max(len(label) for row in labels for label in row)  # rotated labels
    panel = panel_inches(length) + 0.8
    figure = new_figure(
        max(2, shown) * (panel + label_inches) + 1.5, 2 * panel + label_inches + 1.2
    )
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#eeeeee", "#1f4e79"])
    top, bottom = figure.subfigures(2, 1, height_ratios=[panel + 0.6, panel + label_inches + 0.6])
    ax_padding, ax_look_ahead = top.subplots(1, 2)
    image = _mask_image(ax_padding, padding, cmap)
    ax_padding.set_title(f"padding mask ({batch}, {length})")
    ax_padding.set_xlabel("position")
    ax_padding.set_ylabel("example")
    ax_padding.set_yticks(range(batch))
    _mask_image(ax_look_ahead, look_ahead, cmap)
    ax_look_ahead.set_title(f"look-ahead mask ({length}, {length})")
    ax_look_ahead.set_xlabel("key position")
    ax_look_ahead.set_ylabel("query position")
    positions = [str(i) for i in range(length)]
    label_axis(ax_padding, "x", positions)
    label_axis(ax_look_ahead, "x", positions)
    label_axis(ax_look_ahead, "y", positions)
    for b, ax in enumerate(bottom.subplots(1, shown, squeeze=False)[0]):
        _mask_image(ax, combined[b], cmap)
        ax.set_title(f"example {b}")
        label_axis(ax, "x", labels[b])
        label_axis(ax, "y", labels[b])
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    for subfigure in (top, bottom):
        bar = subfigure.colorbar(image, ax=subfigure.axes, ticks=[0.25, 0.75], shrink=0.8)
        bar.ax.set_yticklabels(["blocked", "may attend"])
    top.suptitle("Padding and look-ahead masks of a padded batch (True = may attend)")
    bottom.suptitle("Decoder self-attention masks: look-ahead AND key padding")
    return figure
