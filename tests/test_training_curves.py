"""Training curves: read from a History, TensorBoard events or `bleu.jsonl`, and drawn.

`keras_transformer.training.curves`, `training.bleu.read_bleu_log` and
`keras_transformer.plotting.training`; the figures are saved under `build/test-plots/`.
"""

import json
import logging

import keras
import numpy as np
import pytest
from plot_files import assert_readable, data_axes, draw, save_png

from keras_transformer.plotting import plot_bleu_over_time, plot_training_curves
from keras_transformer.training.bleu import BLEU_LOG_FIELDS, read_bleu_log
from keras_transformer.training.curves import (
    Curve,
    curves_from_history,
    read_run_curves,
    read_tensorboard_curves,
)


def _history(logs):
    history = keras.callbacks.History()
    history.history = logs
    history.epoch = list(range(len(logs["loss"])))
    return history


def test_training_curves_from_a_history():
    logs = {
        "loss": [5.1, 4.0, 3.4, 3.1],
        "val_loss": [4.6, 3.9, 3.5, 3.4],
        "accuracy": [0.11, 0.22, 0.3, 0.36],
        "val_accuracy": [0.12, 0.21, 0.29, 0.33],
        "learning_rate": [1e-4, 2e-4, 3e-4, 2.6e-4],
        "val_bleu": [1.2, 5.0, 9.1, 11.3],
    }
    figure = plot_training_curves(_history(logs))
    save_png(figure, "training_curves_history")
    axes = data_axes(figure)
    assert [ax.get_title() for ax in axes] == [
        "loss",
        "accuracy",
        "learning rate",
        "validation BLEU",
    ]
    by_title = {ax.get_title(): ax for ax in axes}
    for title, keys in {
        "loss": ["loss", "val_loss"],
        "accuracy": ["accuracy", "val_accuracy"],
        "learning rate": ["learning_rate"],
        "validation BLEU": ["val_bleu"],
    }.items():
        ax = by_title[title]
        assert ax.get_xlabel() == "epoch"
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == [
            "validation" if k.startswith("val_") else "training" for k in keys
        ]
        for line, key in zip(lines, keys):
            assert list(line.get_xdata()) == [1, 2, 3, 4]
            assert list(line.get_ydata()) == logs[key]
    assert_readable(figure, axes)


def test_training_curves_leave_out_what_a_history_cannot_place(caplog):
    logs = {"loss": [3.0, 2.0, 1.5], "val_bleu": [4.0]}  # BLEU scored once in 3 epochs
    with caplog.at_level(logging.WARNING):
        curves = curves_from_history(_history(logs))
    assert curves == {"loss": Curve((1, 2, 3), (3.0, 2.0, 1.5))}
    assert "val_bleu (1 of 3 epochs)" in caplog.text
    figure = plot_training_curves(curves)
    assert [ax.get_title() for ax in data_axes(figure)] == ["loss"]
    with pytest.raises(ValueError, match="no curve"):
        plot_training_curves({"steps_per_second": [1.0]})
    with pytest.raises(ValueError, match="History"):
        curves_from_history([1.0, 2.0])


class _FakeBleu(keras.callbacks.Callback):
    """Puts `val_bleu` into the logs every second epoch, as `BleuCallback(every=2)` does."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch % 2:
            logs["val_bleu"] = 10.0 + epoch


def test_tensorboard_curves_equal_the_history(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((64, 4)).astype("float32")
    y = (x.sum(1) > 2).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(keras.optimizers.Adam(0.05), "binary_crossentropy", metrics=["accuracy"])
    log_dir = str(tmp_path / "logs")
    history = model.fit(
        x,
        y,
        epochs=4,
        validation_split=0.25,
        verbose=0,
        callbacks=[_FakeBleu(), keras.callbacks.TensorBoard(log_dir)],
    )
    curves = read_tensorboard_curves(log_dir)
    assert set(curves) == {
        "loss",
        "accuracy",
        "learning_rate",
        "val_loss",
        "val_accuracy",
        "val_bleu",
    }
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert curves[name].epochs == (1, 2, 3, 4)
        np.testing.assert_allclose(curves[name].values, history.history[name], rtol=1e-6)
    assert curves["learning_rate"].values == pytest.approx((0.05,) * 4)
    assert curves["val_bleu"] == Curve((2, 4), (11.0, 13.0))  # at the epochs it was logged
    figure = plot_training_curves(curves, title="From TensorBoard events")
    save_png(figure, "training_curves_tensorboard")
    bleu_ax = [ax for ax in figure.axes if ax.get_title() == "validation BLEU"][0]
    assert list(bleu_ax.get_lines()[0].get_xdata()) == [2, 4]
    assert_readable(figure, data_axes(figure))
    assert read_tensorboard_curves(str(tmp_path / "missing")) == {}


def _bleu_records():
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1"
    return [
        {
            "epoch": e,
            "step": 100 * e,
            "minutes": 3.1 * e,
            "bleu": b,
            "seconds_to_score": 4.0,
            "signature": signature,
        }
        for e, b in zip(range(1, 5), (1.2, 5.0, 9.1, 11.3))
    ]


def test_bleu_log_is_read_and_plotted_against_minutes(tmp_path):
    path = tmp_path / "bleu.jsonl"
    records = _bleu_records()
    resumed = dict(records[2], bleu=9.5)  # a resumed run scored epoch 3 again
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, resumed]))
    read = read_bleu_log(str(path))
    assert [r["epoch"] for r in read] == [1, 2, 3, 4] and read[2]["bleu"] == 9.5
    assert all(tuple(r) == BLEU_LOG_FIELDS for r in read)

    figure = plot_bleu_over_time(str(path))
    save_png(figure, "bleu_over_time")
    (ax,) = figure.axes
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == pytest.approx([3.1, 6.2, 9.3, 12.4])
    assert list(line.get_ydata()) == [1.2, 5.0, 9.5, 11.3]
    assert ax.get_xlabel() == "training time (minutes)" and ax.get_ylabel() == "BLEU"
    assert [t.get_text() for t in ax.texts] == ["epoch 1", "epoch 2", "epoch 3", "epoch 4"]
    assert ax.get_xlim()[0] == 0.0
    renderer = draw(figure)
    for text in ax.texts:  # the epoch labels stay inside the axes
        assert ax.get_window_extent(renderer).contains(*text.get_window_extent(renderer).p1)
    assert "tok:13a" in ax.get_title()
    assert figure.get_suptitle() == "Validation BLEU against training time"
    assert_readable(figure, [ax])

    path.write_text(json.dumps(records[0]) + "\nnot json\n")
    with pytest.raises(ValueError, match="line 2"):
        read_bleu_log(str(path))


def test_run_curves_take_bleu_from_the_log_when_tensorboard_has_none(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "bleu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _bleu_records()))
    curves = read_run_curves(str(run_dir))
    assert curves == {"val_bleu": Curve((1, 2, 3, 4), (1.2, 5.0, 9.1, 11.3))}
    assert read_run_curves(str(tmp_path / "empty")) == {}
