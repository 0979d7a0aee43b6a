"""What every figure of `keras_transformer.plotting` shares: matplotlib, sizes, fonts."""

from __future__ import annotations

from collections.abc import Sequence

# The optional extra that installs matplotlib (setup.cfg).
PLOT_EXTRA = "plot"
# Inches per token on an attention or mask axis: 9-point tick labels do not overlap.
INCHES_PER_PIECE = 0.2
TOKEN_FONT_SIZE = 9


def new_figure(width: float, height: float):
    """A new `Figure` with constrained layout, or an ImportError naming the extra."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "keras_transformer.plotting needs matplotlib, an optional dependency: install "
            f'the `{PLOT_EXTRA}` extra, `pip install "keras-transformer-nmt[{PLOT_EXTRA}]"` '
            f'(in a checkout: `pip install -e ".[{PLOT_EXTRA}]"`).'
        ) from e
    return Figure(figsize=(width, height), layout="constrained")


def panel_inches(count: int) -> float:
    return max(1.6, INCHES_PER_PIECE * count)


def label_axis(ax, axis: str, labels: Sequence[str]) -> None:
    if axis == "x":
        ax.set_xticks(range(len(labels)), list(labels), rotation=90, fontsize=TOKEN_FONT_SIZE)
    else:
        ax.set_yticks(range(len(labels)), list(labels), fontsize=TOKEN_FONT_SIZE)
