"""Figures of training: loss, accuracy, learning rate and validation BLEU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from keras_transformer.plotting._figure import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRAINING_PANELS = (
    ("loss", "loss", ("loss", "val_loss")),
    ("accuracy", "accuracy", ("accuracy", "val_accuracy")),
    ("learning rate", "learning rate", ("learning_rate",)),
    ("validation BLEU", "BLEU", ("val_bleu",)),
)


def plot_training_curves(history: Any, title: str = "Training") -> Figure:
    """Loss, accuracy, learning rate and validation BLEU per epoch, where logged.

    Args:
        history: a `keras.callbacks.History`, its `.history` dict, or the curves of
            `keras_transformer.training.curves` (`read_run_curves`,
            `read_tensorboard_curves`).
        title: the figure's title.

    Returns:
        A `Figure` with one panel per quantity found (training solid, validation dashed).

    Example:
    >>> figure = plot_training_curves({"loss": [5.1, 4.2, 3.8], "val_loss": [4.9, 4.3, 4.1]})
    >>> [ax.get_title() for ax in figure.axes]
    ['loss']
    """
    from keras_transformer.training.curves import curves_from_history

    curves = curves_from_history(history)
    panels = [p for p in TRAINING_PANELS if any(k in curves for k in p[2])]
    if not panels:
        raise ValueError(
            "Received no curve to plot, expected some of "
            f"{[k for p in TRAINING_PANELS for k in p[2]]}. Received: {sorted(curves)}"
        )
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    figure = new_figure(5.5 * columns, 3.8 * rows)
    from matplotlib.ticker import MaxNLocator

    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, (name, ylabel, keys) in zip(axes, panels):
        for key in keys:
            if key not in curves:
                continue
            validation = key.startswith("val_")
            ax.plot(
                curves[key].epochs,
                curves[key].values,
                marker="o",
                linestyle="--" if validation else "-",
                label="validation" if validation else "training",
            )
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if name == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        ax.grid(alpha=0.3)
        ax.legend()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    figure.suptitle(title)
    return figure


def plot_bleu_over_time(
    records: str | Sequence[dict], title: str = "Validation BLEU against training time"
) -> Figure:
    """Validation BLEU against training minutes, from a run's `bleu.jsonl`.

    Args:
        records: the path of a `bleu.jsonl` or its records (`read_bleu_log`).
        title: the figure's title.

    Returns:
        A `Figure`: BLEU against minutes, points marked with their epoch, sacreBLEU's
        signature under the title.

    Example:
    >>> records = [
    ...     {"epoch": 1, "minutes": 3.2, "bleu": 12.4},
    ...     {"epoch": 2, "minutes": 6.5, "bleu": 20.0},
    ... ]
    >>> figure = plot_bleu_over_time(records)
    >>> figure.axes[0].get_lines()[0].get_xydata().tolist()
    [[3.2, 12.4], [6.5, 20.0]]
    """
    if isinstance(records, str):
        from keras_transformer.training.bleu import read_bleu_log

        records = read_bleu_log(records)
    if not records:
        raise ValueError("Received no BLEU record to plot (an empty bleu.jsonl?).")
    minutes = [float(r["minutes"]) for r in records]
    bleu = [float(r["bleu"]) for r in records]
    figure = new_figure(7.0, 4.5)
    ax = figure.subplots()
    ax.plot(minutes, bleu, marker="o")
    step = -(-len(records) // 15)  # at most 15 epoch labels
    for i in range(0, len(records), step):
        ax.annotate(
            f"epoch {records[i]['epoch']}",
            (minutes[i], bleu[i]),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
        )
    ax.set_xlim(0.0, 1.2 * max(minutes) or 1.0)  # from the start, with room for the labels
    ax.margins(y=0.15)
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel("BLEU")
    figure.suptitle(title)
    signature = records[-1].get("signature")
    if signature:
        ax.set_title(f"sacreBLEU {signature}", fontsize=8, color="0.35")
    ax.grid(alpha=0.3)
    return figure
