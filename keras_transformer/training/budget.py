"""Training within a wall-clock budget, and the per-epoch weights that averaging reads."""

from __future__ import annotations

import logging
import os
import re
import time

import keras

from keras_transformer import storage
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

    def remaining_seconds(self) -> float:
        """Seconds left in the budget (negative once it has passed)."""
        return self.max_minutes * 60.0 - (time.monotonic() - self.start)

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


class BudgetHorizon(keras.callbacks.Callback):
    """Ends a linear or cosine learning-rate decay when the time budget ends.

    At each epoch end it measures the time an epoch takes (its steps, validation and
    epoch-end work) and moves the schedule's horizon (`TransformerSchedule.set_horizon`) to
    the step training will have reached when `max_minutes` have passed since `start`, so the
    rate reaches zero with the budget on any machine, however fast. The last epoch the
    budget allows is planned whole; `TimeBudget` still stops training at the limit. The
    horizon never passes `epochs * steps_per_epoch` (the planned end). Place it after the
    callbacks whose epoch-end work (validation BLEU) should count.

    Args:
        schedule: the optimizer's `TransformerSchedule` (decay `"linear"` or `"cosine"`).
        max_minutes: the budget.
        start: `time.monotonic()` at the start of the budget.
        planned_steps: `epochs * steps_per_epoch`.
    """

    def __init__(self, schedule, max_minutes: float, start: float, planned_steps: int):
        super().__init__()
        self.schedule = schedule
        self.max_minutes = check_positive_float("max_minutes", max_minutes)
        self.start = start
        self.planned_steps = check_positive_int("planned_steps", planned_steps)
        self._last_end: float | None = None
        self._last_step = 0
        self.horizons: list[int] = []

    def on_train_begin(self, logs=None):
        self._last_end = time.monotonic()
        self._last_step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_end(self, epoch, logs=None):
        # Everything since the previous epoch's end: steps, validation, and the epoch-end
        # work of the callbacks before this one (place it last).
        now = time.monotonic()
        step = int(self.model.optimizer.iterations.numpy())
        steps = step - self._last_step
        if steps <= 0 or self._last_end is None:
            return
        seconds_per_step = (now - self._last_end) / steps
        self._last_end, self._last_step = now, step
        remaining = self.max_minutes * 60.0 - (now - self.start)
        horizon = min(self.planned_steps, step + max(0, int(remaining / seconds_per_step)))
        self.schedule.set_horizon(horizon)
        self.horizons.append(horizon)
        logger.info(
            "Time budget: %.1f of %.1f minutes left; the learning rate now reaches zero at "
            "step %d.",
            max(remaining, 0.0) / 60.0,
            self.max_minutes,
            horizon,
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
        storage.makedirs(self.directory)
        path = os.path.join(self.directory, EPOCH_WEIGHTS_PATTERN.format(epoch=epoch + 1))
        with storage.written_beside(path) as partial:  # never half written: averaging reads it
            self.model.save_weights(partial)
        for old in epoch_weight_files(self.directory)[: -self.keep]:
            storage.remove(old)


def epoch_weight_files(directory: str) -> list[str]:
    """The `epoch-NNN.weights.h5` files of `directory`, oldest first."""
    found = []
    for path in storage.glob(os.path.join(directory, "epoch-*.weights.h5")):
        match = _EPOCH_WEIGHTS_RE.search(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]
