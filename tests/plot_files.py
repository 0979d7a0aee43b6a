"""Where the tests write their figures, and what makes a figure readable.

Every figure a test draws is saved as PNG under `build/test-plots/` in the repository
(git-ignored; `KERAS_TRANSFORMER_TEST_PLOTS` names another folder), so a person can look
at them after `pytest`. `assert_readable` checks what can be checked by machine: a title,
no two tick labels of an axis overlapping, every tick label inside the
figure, and token labels at least `MIN_FONT_SIZE` points.
"""

import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOTS_DIR = os.environ.get(
    "KERAS_TRANSFORMER_TEST_PLOTS", os.path.join(ROOT, "build", "test-plots")
)
MIN_FONT_SIZE = 8


def save_png(figure, name: str) -> str:
    """Saves `figure` as `PLOTS_DIR/name.png` and checks the file is a PNG image."""
    os.makedirs(PLOTS_DIR, exist_ok=True)
    path = os.path.join(PLOTS_DIR, f"{name}.png")
    figure.savefig(path, dpi=100)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
    return path


def draw(figure):
    """Draws `figure` with Agg and returns the renderer (for text extents)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def visible_tick_labels(ax, axis: str):
    """The tick labels of `ax`'s x or y axis that are drawn: shown, non-empty, in view."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(target.get_view_interval())
    labels = []
    for tick, location in zip(target.get_major_ticks(), target.get_majorticklocs()):
        tolerance = 1e-9 * max(1.0, abs(high - low))
        in_view = low - tolerance <= location <= high + tolerance
        if in_view and tick.label1.get_visible() and tick.label1.get_text():
            labels.append(tick.label1)
    return labels


def assert_readable(figure, data_axes):
    """Checks the titles and tick labels of `data_axes` (the axes that are no colour bar)."""
    renderer = draw(figure)
    bounds = figure.bbox
    for ax in data_axes:
        assert ax.get_title(), f"an axes without a title in {figure.get_suptitle()!r}"
        for axis in ("x", "y"):
            labels = visible_tick_labels(ax, axis)
            boxes = [label.get_window_extent(renderer) for label in labels]
            for label, box in zip(labels, boxes):
                assert label.get_fontsize() >= MIN_FONT_SIZE, label.get_text()
                # Inside the figure (one pixel of rounding allowed).
                assert box.x0 >= bounds.x0 - 1 and box.x1 <= bounds.x1 + 1, label.get_text()
                assert box.y0 >= bounds.y0 - 1 and box.y1 <= bounds.y1 + 1, label.get_text()
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    assert not _overlaps(boxes[i], boxes[j]), (
                        f"tick labels {labels[i].get_text()!r} and {labels[j].get_text()!r} "
                        f"overlap on the {axis} axis of {ax.get_title()!r}"
                    )


def heat_maps(figure):
    """The (axes, image array) of every heat map of `figure`, in drawing order."""
    return [(ax, np.asarray(ax.images[0].get_array())) for ax in figure.axes if ax.images]


def colorbar_axes(figure):
    return [ax for ax in figure.axes if ax.get_label() == "<colorbar>"]


def data_axes(figure):
    """The visible axes that are no colour bar."""
    return [ax for ax in figure.axes if ax.get_label() != "<colorbar>" and ax.get_visible()]
