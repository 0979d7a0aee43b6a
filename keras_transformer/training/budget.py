"""Training within a wall-clock budget, and the per-epoch weights that averaging reads."""

from __future__ import annotations

import glob
import logging
import os
import re
import time

import keras

from keras_transformer.validation import check_positive_float, check_positive_int

logger = logging.getLogger(__name__)

EPOCH_WEIGHTS_PATTERN = "epoch-{epoch:03d}.weights.h5"
_EPOCH_WEIGHTS_RE = re.compile(r"epoch-(\d+)\.weights\.h5$")


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the first step boundary after `max_minutes` of wall-clock time.

    The clock starts at `start` (a `time.monotonic()` value, so time spent before `fit`,
    such as tokenizer training, can count) or when training begins. Keras then finishes
    the epoch as if it were the last: the validation runs, epoch-end callbacks save, and
    `fit` returns normally.

    Args:
        max_minutes: the budget.
        start: `time.monotonic()` at the start of the budget; defaults to `on_train_begin`.

    Example (not run as a doctest: it trains a model):

    ```python
    model.fit(data, epochs=100, callbacks=[TimeBudget(60)])
    ```
    """

    def __init__(self, max_minutes: float, start: float | None = None):
        super().__init__()
        self.max_minutes = check_positive_float("max_minutes", max_minutes)
        self.start = start
        self.stopped_at: tuple[int, int] | None = None  # (epoch, step) where it stopped
        self._epoch = 0

    def elapsed_minutes(self) -> float:
        return (time.monotonic() - self.start) / 60.0

    def on_train_begin(self, logs=None):
        if self.start is None:
            self.start = time.monotonic()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.stopped_at is None and self.elapsed_minutes() >= self.max_minutes:
            self.stopped_at = (self._epoch, batch + 1)
            self.model.stop_training = True
            logger.info(
                "The time budget of %.1f minutes is spent: stopping after step %d of epoch %d.",
                self.max_minutes,
                batch + 1,
                self._epoch + 1,
            )


class EpochWeights(keras.callbacks.Callback):
    """Saves the weights at the end of every epoch as `epoch-NNN.weights.h5`, keeping the
    last `keep` files (what checkpoint averaging reads).

    Args:
        directory: the folder of the files.
        keep: how many of the latest files to keep.
    """

    def __init__(self, directory: str, keep: int = 5):
        super().__init__()
        self.directory = directory
        self.keep = check_positive_int("keep", keep)

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, EPOCH_WEIGHTS_PATTERN.format(epoch=epoch + 1))
        self.model.save_weights(path)
        for old in epoch_weight_files(self.directory)[: -self.keep]:
            os.remove(old)


def epoch_weight_files(directory: str) -> list[str]:
    """The `epoch-NNN.weights.h5` files of `directory`, oldest first."""
    found = []
    for path in glob.glob(os.path.join(directory, "epoch-*.weights.h5")):
        match = _EPOCH_WEIGHTS_RE.search(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]
