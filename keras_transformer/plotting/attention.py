"""Attention weights of a translation, and their figures with the SentencePiece pieces on
the axes.

`translation_attention` translates one sentence, then runs the model teacher-forced on
`[BOS] + translation` with `return_attention_scores=True` and returns the weights as numpy
arrays next to the pieces that label their axes; `plot_translation_attention`,
`plot_attention_heads` and `plot_attention` draw them.

Example:

```python
source, target, weights = translation_attention(translator, "Ein Hund läuft.")
weights["cross_attention"].shape  # (layers, heads, len(target), len(source))
figure = plot_attention(source, target, weights["cross_attention"][-1].mean(axis=0))
figure.savefig("attention.png")
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID
from keras_transformer.plotting._figure import label_axis, new_figure, panel_inches

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Decoder self-attention keys are the decoder inputs: BOS, then the emitted pieces but the last.
BOS_PIECE = "<s>"
ATTENTION_KINDS = {
    "encoder_self_attention": "Encoder self-attention",
    "decoder_self_attention": "Decoder self-attention",
    "cross_attention": "Cross-attention (decoder queries, encoder keys)",
}


def _pieces(tokenizer, ids: np.ndarray) -> list[str]:
    if len(ids) == 0:
        return []
    pieces = tokenizer.id_to_piece(tf.constant(np.asarray(ids, np.int32))).numpy()
    return [p.decode("utf-8") for p in pieces]


def translation_attention(
    translator, sentence: str, hypothesis: int = 0
) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """Translates `sentence` and returns the attention weights behind its translation.

    Args:
        translator: a `keras_transformer.translator.Translator`.
        sentence: the source sentence.
        hypothesis: which of the translator's hypotheses (0 = best).

    Returns:
        `(source_pieces, target_pieces, weights)`: the S source pieces (EOS last when the
        translator appends it), the T emitted target
        pieces (EOS included when emitted) and a dict of float32 arrays:
        `"cross_attention"` (L, H, T, S), `"decoder_self_attention"` (L, H, T, T) and
        `"encoder_self_attention"` (L, H, S, S). Row t of the decoder weights belongs to the
        step that emitted target piece t.

    Example (not run as a doctest: it needs a trained translator):

    ```python
    src, tgt, w = translation_attention(translator, "Ein Hund.")
    w["cross_attention"].shape
    # (6, 8, 4, 3)
    ```
    """
    source_ids = translator.encode_sources([sentence])[0]  # EOS last with source_eos
    if len(source_ids) <= int(translator.source_eos):
        raise ValueError(
            "Received an invalid value for argument `sentence`, expected a sentence with at "
            f"least one token. Received: sentence={sentence!r}"
        )
    tokens, _ = translator.decode_ids([source_ids])
    target = np.asarray(tokens[0][hypothesis])  # (T_max,)
    eos_id = int(getattr(translator.target_tokenizer, "eos_id", EOS_ID))
    pad_id = int(translator.model.pad_id)
    ends = np.flatnonzero(target == eos_id)
    length = int(ends[0]) + 1 if ends.size else int(np.sum(target != pad_id))
    target = target[:length]  # (T,)
    bos_id = int(getattr(translator.target_tokenizer, "bos_id", BOS_ID))
    decoder_inputs = np.concatenate([[bos_id], target[:-1]]).astype(np.int32)  # (T,)
    _, attention = translator.model(
        (tf.constant(source_ids[None]), tf.constant(decoder_inputs[None])),
        return_attention_scores=True,
        training=False,
    )
    weights = {
        name: np.stack([np.asarray(w, np.float32)[0] for w in attention[name]])
        for name in ("cross_attention", "decoder_self_attention", "encoder_self_attention")
    }  # (L, H, ., .)
    return (
        _pieces(translator.source_tokenizer, source_ids),
        _pieces(translator.target_tokenizer, target),
        weights,
    )


def _check_weights(weights: Any, rows: int, columns: int, name: str) -> np.ndarray:
    weights = np.asarray(weights, np.float32)
    if weights.ndim < 2 or weights.shape[-2:] != (rows, columns):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected shape (..., {rows}, "
            f"{columns}) (query pieces, key pieces). Received: {name}.shape={weights.shape}"
        )
    return weights


def plot_attention(
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    weights: Any,
    ax: Any = None,
    title: str | None = None,
) -> Figure:
    """Draws one (T, S) attention matrix as a heat map with the pieces on the axes.

    Args:
        source_pieces: the S column labels (keys).
        target_pieces: the T row labels (queries).
        weights: (T, S) weights, e.g. one head `w[layer, head]` or `w[layer].mean(0)`.
        ax: a matplotlib `Axes` to draw on; a new figure is made when None.
        title: the axes' title.

    Returns:
        The matplotlib `Figure`.

    Example:
    >>> figure = plot_attention(["▁Hund", "</s>"], ["▁dog", "</s>"], [[0.9, 0.1], [0.2, 0.8]])
    >>> [label.get_text() for label in figure.axes[0].get_xticklabels()]
    ['▁Hund', '</s>']
    """
    weights = _check_weights(weights, len(target_pieces), len(source_pieces), "weights")
    if weights.ndim != 2:
        raise ValueError(f"Expected (T, S) weights. Received: weights.shape={weights.shape}")
    if ax is None:
        figure = new_figure(
            panel_inches(len(source_pieces)) + 2.5, panel_inches(len(target_pieces)) + 1.5
        )
        ax = figure.subplots()
    else:
        figure = ax.figure
    image = ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    label_axis(ax, "x", source_pieces)
    label_axis(ax, "y", target_pieces)
    ax.set_xlabel("source (key)")
    ax.set_ylabel("target (query)")
    if title:
        ax.set_title(title)
    figure.colorbar(image, ax=ax, label="attention weight")
    return figure


def plot_attention_heads(
    weights: Any,
    query_pieces: Sequence[str],
    key_pieces: Sequence[str],
    title: str | None = None,
    query_label: str = "query",
    key_label: str = "key",
) -> Figure:
    """Every layer (rows) and head (columns) of one kind of attention, pieces on the axes.

    Args:
        weights: (L, H, T, S) weights (or (H, T, S) for one layer).
        query_pieces: the T row labels.
        key_pieces: the S column labels.
        title: the figure's title.
        query_label: the y axis label.
        key_label: the x axis label.

    Returns:
        A `Figure` of L x H heat maps sharing one colour scale (0 to the largest weight);
        the pieces label the left column and the bottom row.

    Example:
    >>> weights = np.full((2, 4, 3, 5), 0.2)  # 2 layers, 4 heads, 3 queries, 5 keys
    >>> figure = plot_attention_heads(weights, list("abc"), list("vwxyz"), "Cross-attention")
    >>> sum(1 for ax in figure.axes if ax.images)
    8
    """
    weights = _check_weights(weights, len(query_pieces), len(key_pieces), "weights")
    if weights.ndim == 3:
        weights = weights[None]
    if weights.ndim != 4:
        raise ValueError(
            f"Expected (layers, heads, T, S) weights. Received: weights.shape={weights.shape}"
        )
    layers, heads = weights.shape[:2]
    width = heads * (panel_inches(len(key_pieces)) + 0.2) + 2.0
    height = layers * (panel_inches(len(query_pieces)) + 0.35) + 1.8
    figure = new_figure(width, height)
    axes = figure.subplots(layers, heads, squeeze=False, sharex=True, sharey=True)
    vmax = float(weights.max()) or 1.0
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(
                weights[layer, head], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto"
            )
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=10)
            label_axis(ax, "x", key_pieces)
            label_axis(ax, "y", query_pieces)
            ax.label_outer()  # pieces on the bottom row and the left column only
    figure.supxlabel(key_label)
    figure.supylabel(query_label)
    if title:
        figure.suptitle(title, fontsize=13)
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.6)
    return figure


def plot_translation_attention(
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    weights: dict[str, Any],
    bos_piece: str = BOS_PIECE,
) -> dict[str, Figure]:
    """The three kinds of attention behind a translation, every layer and head.

    Args:
        source_pieces: the S source pieces, as `translation_attention` returns them.
        target_pieces: the T emitted target pieces.
        weights: `translation_attention`'s dict: `encoder_self_attention` (L, H, S, S),
            `decoder_self_attention` (L, H, T, T), `cross_attention` (L, H, T, S).
        bos_piece: the name of the first decoder input; decoder self-attention keys are
            the decoder inputs `[bos_piece] + target_pieces[:-1]`.

    Returns:
        `{kind: Figure}` for the three kinds (`ATTENTION_KINDS`).

    Example (not run as a doctest: it needs a trained translator):

    ```python
    source, target, weights = translation_attention(translator, "Ein Hund.")
    for kind, figure in plot_translation_attention(source, target, weights).items():
        figure.savefig(f"{kind}.png")
    ```
    """
    decoder_inputs = [bos_piece, *target_pieces[:-1]]
    axes = {
        "encoder_self_attention": (source_pieces, source_pieces, "source piece"),
        "decoder_self_attention": (target_pieces, decoder_inputs, "decoder input"),
        "cross_attention": (target_pieces, source_pieces, "source piece"),
    }
    figures = {}
    for kind, title in ATTENTION_KINDS.items():
        rows, columns, key_label = axes[kind]
        query_label = "source piece" if kind == "encoder_self_attention" else "emitted piece"
        figures[kind] = plot_attention_heads(
            weights[kind], rows, columns, title, query_label=query_label, key_label=key_label
        )
    return figures
