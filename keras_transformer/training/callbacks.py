"""Callbacks of a training run: backup/restore mid-epoch, checkpoints, logs."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import warnings
from collections.abc import Sequence

import keras

from keras_transformer import storage
from keras_transformer.compat import (
    backup_epoch,
    backup_files,
    finalize_ema_values,
    set_backup_epoch,
    set_backup_files,
    set_initial_epoch,
)
from keras_transformer.validation import check_positive_int

logger = logging.getLogger(__name__)


class BackupMismatchError(ValueError):
    """A backup that does not fit the model (or optimizer) a run resumes with.

    Attributes:
        detail: what Keras reported when restoring it.
    """

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


# The backup state's mark of a run whose `fit` returned.
FINISHED_KEY = "finished"
# The backup state's copy of R-Drop's check (`rdrop.RDropStart`), so that a resumed run keeps it.
RDROP_DECISION_KEY = "rdrop_decision"


class ResumableBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that resumes an interrupted epoch where it stopped.

    Keras' callback restores the weights, the optimizer state and the epoch, but then runs
    the interrupted epoch again from its first step. With `steps_per_epoch` known, this one
    also records how many steps of the epoch were done at the last backup and, after a
    restart, ends that epoch after the remaining steps only, so a run killed and restarted
    makes exactly `epochs * steps_per_epoch` optimizer steps in all (the data stream is not
    rewound: the resumed epoch draws fresh batches). Place it first among the callbacks
    (before `EarlyStopping`), as `make_callbacks` does.

    A backup that does not fit the model raises `BackupMismatchError` (a `ValueError`)
    before the first step: Keras raises for layers or shapes that differ, but only warns
    for an optimizer whose state differs (EMA turned on, say) and trains on with a fresh
    optimizer, its step (so the learning rate) back at 0.

    Args:
        backup_dir: the folder of the backup (used by nothing else).
        save_freq: `"epoch"` or a number of steps between backups.
        steps_per_epoch: the steps of an epoch; without it an interrupted epoch restarts
            from its beginning, as with Keras' callback.
        delete_checkpoint: delete the backup when training ends (Keras' argument). Keras'
            `double_checkpoint` (a copy of the last backup, for one left half written) is
            not needed: each backup is written beside the last and moved over it.

    Example (not run as a doctest: it trains a model):

    ```python
    backup = ResumableBackupAndRestore("runs/x/backup", save_freq=100,
                                       steps_per_epoch=1000)
    ```
    """

    STATE_FILENAME = "resume_state.json"

    def __init__(
        self,
        backup_dir: str,
        save_freq: int | str = "epoch",
        steps_per_epoch: int | None = None,
        delete_checkpoint: bool = True,
    ):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=delete_checkpoint)
        if steps_per_epoch is not None:
            check_positive_int("steps_per_epoch", steps_per_epoch)
        self.steps_per_epoch = steps_per_epoch
        self._state_path = os.path.join(backup_dir, self.STATE_FILENAME)
        self._steps_done = 0
        self._skip = 0
        self._stopped_epoch = False
        self.restored_epoch: int | None = None
        self.restored_steps = 0

    def on_train_begin(self, logs=None):
        self._restore()
        if not storage.exists(self._state_path):
            return
        state = json.loads(storage.read_text(self._state_path))
        epoch, steps = int(state["epoch"]), int(state["steps"])
        self.restored_epoch, self.restored_steps = epoch, steps
        if state.get(RDROP_DECISION_KEY) is not None:
            self.model.rdrop_decision = bool(state[RDROP_DECISION_KEY])
        if state.get(FINISHED_KEY):
            # `fit` had returned (the budget or early stopping may have ended it before its
            # epochs): nothing is left to train, only the model to save.
            set_initial_epoch(self.model, self.params["epochs"])
            logger.info("Restored the backup of a run that ended: no step left to train.")
            return
        if self.steps_per_epoch and steps >= self.steps_per_epoch:
            set_initial_epoch(self.model, epoch + 1)
        elif self.steps_per_epoch and steps > 0:
            self._skip = steps
        logger.info("Restored the backup of epoch %d after %d step(s).", epoch + 1, steps)

    def _restore(self) -> None:
        """Keras' restore, refused (`BackupMismatchError`) when the backup does not fit."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                super().on_train_begin()
            except ValueError as error:
                if not self.model.built:  # Keras' own error: nothing was restored
                    raise
                raise self._mismatch(error) from error
        skipped = [w for w in caught if "Skipping variable loading" in str(w.message)]
        for w in caught:
            if w not in skipped:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if skipped:
            raise self._mismatch(skipped[0].message)

    def _mismatch(self, keras_message: object) -> BackupMismatchError:
        detail = " ".join(
            line.strip() for line in str(keras_message).splitlines()[:3] if line.strip()
        )
        return BackupMismatchError(
            f"Received a backup that does not fit the model being trained: {self.backup_dir} "
            f"holds the state of another model or optimizer (Keras: {detail}). Expected the "
            "model and optimizer settings of the run that wrote the backup, to resume it, or "
            "another backup directory.",
            detail,
        )

    def on_epoch_begin(self, epoch, logs=None):
        # Keras only updates the epoch at epoch end, so backups taken during the first
        # epoch after a restart would otherwise record epoch 0.
        set_backup_epoch(self, epoch)
        self._steps_done = self._skip

    def on_train_batch_end(self, batch, logs=None):
        self._steps_done = self._skip + batch + 1
        super().on_train_batch_end(batch, logs)
        if (
            self._skip
            and self.steps_per_epoch
            and self._steps_done >= self.steps_per_epoch
            and not self.model.stop_training
        ):
            self.model.stop_training = True
            self._stopped_epoch = True

    def back_up(self) -> None:
        """Writes the backup now (the steps of the epoch done so far)."""
        self._save_model()

    def on_epoch_end(self, epoch, logs=None):
        if self._stopped_epoch:
            self.model.stop_training = False
            self._stopped_epoch = False
        self._skip = 0
        self._steps_done = 0
        super().on_epoch_end(epoch, logs)
        if self.save_freq != "epoch":
            self._save_model()

    def on_train_end(self, logs=None):
        # `fit` returned: the run ended (its epochs, early stopping or the time budget), and
        # the backup says so, for a rerun after a kill before the model was saved.
        if storage.exists(self._state_path):
            state = json.loads(storage.read_text(self._state_path))
            with storage.written_beside(self._state_path) as partial:
                storage.write_text(partial, json.dumps({**state, FINISHED_KEY: True}))
        super().on_train_end(logs)

    def _save_model(self):
        # Each file written beside the backup's own and moved over it (the weights first):
        # a process killed while writing leaves the last backup whole (a half-written one
        # cannot be restored).
        weights_path, metadata_path = backup_files(self)
        with (
            storage.written_beside(self._state_path) as state,
            storage.written_beside(metadata_path) as metadata,
            storage.written_beside(weights_path) as weights,
        ):
            set_backup_files(self, weights, metadata)
            try:
                super()._save_model()
            finally:
                set_backup_files(self, weights_path, metadata_path)
            values = {"epoch": backup_epoch(self), "steps": self._steps_done}
            decision = getattr(self.model, "rdrop_decision", None)
            if decision is not None:  # R-Drop's check (`rdrop.RDropStart`), kept on resume
                values[RDROP_DECISION_KEY] = decision
            storage.write_text(state, json.dumps(values))


def tensorboard_available() -> bool:
    """Whether the `tensorboard` package (needed by `keras.callbacks.TensorBoard`) exists."""
    return importlib.util.find_spec("tensorboard") is not None


class FinalizeEMAOnStop(keras.callbacks.Callback):
    """Keeps the EMA in the model when training stops before its last planned epoch.

    `keras.callbacks.SwapEMAWeights(swap_on_epoch=True)` writes the EMA into the model at
    the end of the last planned epoch only; when a callback stops training earlier (a time
    budget, early stopping), `fit`'s final `finalize_variable_values` would put the raw
    weights back. Placed after every callback that may stop training, this one finalizes
    the EMA at whichever epoch turns out to be the last.

    Args:
        swap: the run's `SwapEMAWeights(swap_on_epoch=True)`.
    """

    def __init__(self, swap: keras.callbacks.SwapEMAWeights):
        super().__init__()
        self.swap = swap

    def on_epoch_end(self, epoch, logs=None):
        if self.model.stop_training and epoch != self.params["epochs"] - 1:
            finalize_ema_values(self.swap)


def make_callbacks(
    *,
    backup_dir: str | None = None,
    backup_freq: int | str = "epoch",
    steps_per_epoch: int | None = None,
    checkpoint_dir: str | None = None,
    keep_epoch_weights: int | None = None,
    log_dir: str | None = None,
    early_stopping_patience: int | None = None,
    monitor: str = "val_loss",
    use_ema: bool = False,
    max_minutes: float | None = None,
    start: float | None = None,
    task_callbacks: Sequence[keras.callbacks.Callback] = (),
    schedule=None,
    planned_steps: int | None = None,
    delete_backup: bool = True,
) -> list[keras.callbacks.Callback]:
    """The callbacks of a training run, in a working order.

    Args:
        backup_dir: `ResumableBackupAndRestore`'s folder (no backup if None).
        backup_freq: steps between backups, or `"epoch"`.
        steps_per_epoch: the steps of an epoch (exact mid-epoch resume).
        checkpoint_dir: `ModelCheckpoint` writes `best.weights.h5` (best `monitor`) and
            `last.weights.h5` there (none if None).
        keep_epoch_weights: also keep the weights of the last N epochs in `checkpoint_dir`
            (`budget.EpochWeights`, for checkpoint averaging); None: not kept.
        log_dir: the `TensorBoard` folder (none if None, or if the `tensorboard` package is
            not installed: then a warning is logged).
        early_stopping_patience: epochs without `monitor` improving before stopping
            (`EarlyStopping`, restoring nothing); None disables it.
        monitor: the quantity watched by the checkpoint and early stopping.
        use_ema: the optimizer keeps an EMA of the weights: epoch-end callbacks, the
            validation and the final model see the EMA (`SwapEMAWeights`).
        max_minutes: a wall-clock budget (`budget.TimeBudget`) counted from `start`.
        start: `time.monotonic()` at the start of the run.
        task_callbacks: the task's own callbacks (`Task.callbacks`: translation's
            `bleu.BleuCallback`), placed before the logging callbacks so they see what
            they log (`val_bleu`).
        schedule: the optimizer's `TransformerSchedule`: with `max_minutes` and a linear
            or cosine decay, `budget.BudgetHorizon` ends the decay with the budget.
        planned_steps: `epochs * steps_per_epoch`, the decay's end without a budget.
        delete_backup: delete the backup when training ends (False: the caller deletes
            it, as `fit_and_save` does once the trained model is saved).

    Returns:
        `[TerminateOnNaN, ResumableBackupAndRestore, SwapEMAWeights, TimeBudget,
        EpochWeights, ModelCheckpoint x2, *task_callbacks, BudgetHorizon, TensorBoard,
        EarlyStopping, FinalizeEMAOnStop]`, without the disabled ones. Callbacks that may
        stop training belong before `FinalizeEMAOnStop`.
    """
    from keras_transformer.training.budget import BudgetHorizon, EpochWeights, TimeBudget

    callbacks: list[keras.callbacks.Callback] = [keras.callbacks.TerminateOnNaN()]
    if backup_dir:
        # Before the EMA swap: backups hold the raw weights and the EMA where they belong.
        callbacks.append(
            ResumableBackupAndRestore(
                backup_dir,
                save_freq=backup_freq,
                steps_per_epoch=steps_per_epoch,
                delete_checkpoint=delete_backup,
            )
        )
    swap = keras.callbacks.SwapEMAWeights(swap_on_epoch=True) if use_ema else None
    if swap is not None:
        callbacks.append(swap)
    if max_minutes is not None:
        callbacks.append(TimeBudget(max_minutes, start))
    if checkpoint_dir:
        storage.makedirs(checkpoint_dir)
        if keep_epoch_weights:
            callbacks.append(EpochWeights(checkpoint_dir, keep=keep_epoch_weights))
        callbacks.append(
            keras.callbacks.ModelCheckpoint(
                os.path.join(checkpoint_dir, "best.weights.h5"),
                monitor=monitor,
                save_best_only=True,
                save_weights_only=True,
            )
        )
        callbacks.append(
            keras.callbacks.ModelCheckpoint(
                os.path.join(checkpoint_dir, "last.weights.h5"), save_weights_only=True
            )
        )
    callbacks.extend(task_callbacks)
    if max_minutes is not None and getattr(schedule, "horizon", None) is not None:
        callbacks.append(BudgetHorizon(schedule, max_minutes, start, planned_steps))
    if log_dir:
        if tensorboard_available():
            callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
        else:
            logger.warning(
                "TensorBoard is not installed (`pip install tensorboard`): no logs in %s.",
                log_dir,
            )
    if early_stopping_patience is not None:
        callbacks.append(
            keras.callbacks.EarlyStopping(monitor=monitor, patience=early_stopping_patience)
        )
    if swap is not None:
        callbacks.append(FinalizeEMAOnStop(swap))  # after everything that may stop training
    return callbacks
