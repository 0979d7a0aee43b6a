"""The run loop every task shares: callbacks, `model.fit`, averaging, the saved model."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.compat import in_multi_worker_mode
from keras_transformer.config import ExperimentConfig
from keras_transformer.run_dir import RunPaths
from keras_transformer.training.averaging import average_weights
from keras_transformer.training.budget import epoch_weight_files
from keras_transformer.training.callbacks import ResumableBackupAndRestore, make_callbacks
from keras_transformer.training.preemption import BackupOnTerminate
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import is_chief, sync_workers, worker_id

logger = logging.getLogger(__name__)

# Per-epoch weights kept in `checkpoints/` (more when `training.average_last` asks).
KEEP_EPOCH_WEIGHTS = 5


def fit_and_save(
    model: keras.Model,
    config: ExperimentConfig,
    paths: RunPaths,
    strategy: tf.distribute.Strategy,
    train_data: tf.data.Dataset,
    validation_data: tf.data.Dataset | None,
    *,
    schedule: TransformerSchedule,
    steps_per_epoch: int,
    start: float,
    saved_model: Callable[[], keras.Model],
    task_callbacks: Sequence[keras.callbacks.Callback] = (),
    extra_callbacks: Sequence[keras.callbacks.Callback] | None = None,
) -> keras.callbacks.History:
    """The run loop every task shares: the run's callbacks, `model.fit`, checkpoint
    averaging (`training.average_last`), then the chief saves `saved_model()` as
    `model.keras`, and each worker deletes its backup.

    Args:
        model: the compiled model.
        config: the experiment config (its `training` section is read).
        paths: the run directory.
        strategy: the distribution strategy (non-chief workers get their own folders).
        train_data, validation_data: the batched datasets (validation may be None); the
            training data repeats without end.
        schedule: the learning-rate schedule (`BudgetHorizon` moves its horizon).
        steps_per_epoch: steps of one epoch (the planned end is `epochs` of them).
        start: `time.monotonic()` at the start of the run (the time budget's origin).
        saved_model: returns the model to save (the plain model, without training state).
        task_callbacks: the task's own callbacks (`Task.callbacks`).
        extra_callbacks: more callbacks, after the run's own.

    Returns:
        The History of `model.fit`.
    """
    t = config.training
    chief = is_chief(strategy)
    # Non-chief workers keep their backups, checkpoints and logs apart from the chief's, in
    # the run directory (a bucket too): Keras 3's BackupAndRestore writes where it is told on
    # every worker (tf.keras 2 sent non-chiefs to temporary folders of their own).
    suffix = "" if chief else f"_worker{worker_id(strategy)}"
    callbacks = make_callbacks(
        backup_dir=paths.backup + suffix,
        backup_freq=t.backup_freq,
        steps_per_epoch=steps_per_epoch,
        checkpoint_dir=paths.checkpoints + suffix,
        keep_epoch_weights=max(t.average_last or 1, KEEP_EPOCH_WEIGHTS),
        log_dir=(paths.logs + suffix) if t.tensorboard else None,
        early_stopping_patience=(
            t.early_stopping_patience if validation_data is not None else None
        ),
        monitor="val_loss" if validation_data is not None else "loss",
        use_ema=t.use_ema,
        max_minutes=t.max_minutes,
        start=start,
        task_callbacks=task_callbacks,
        schedule=schedule,
        planned_steps=t.epochs * steps_per_epoch,
        delete_backup=False,  # once the model is saved, below
    )
    # One worker: a SIGTERM backs up at the end of the step, then ends the process.
    backup = next(c for c in callbacks if isinstance(c, ResumableBackupAndRestore))
    on_terminate = None if in_multi_worker_mode(strategy) else BackupOnTerminate(backup)
    if on_terminate is not None:
        callbacks.insert(callbacks.index(backup) + 1, on_terminate)
    callbacks += list(extra_callbacks or [])
    with on_terminate or contextlib.nullcontext():
        history = model.fit(
            train_data,
            epochs=t.epochs,
            steps_per_epoch=steps_per_epoch,
            validation_data=validation_data,
            validation_steps=t.validation_steps,
            callbacks=callbacks,
            verbose=t.verbose,
            shuffle=False,  # make_batches already shuffles; Keras ignores, and warns, for datasets
        )
    if t.average_last and t.average_last > 1:
        files = epoch_weight_files(paths.checkpoints + suffix)[-t.average_last :]
        average_weights(model, files)
    if chief:
        with storage.written_beside(paths.model) as partial:
            saved_model().save(partial)
        logger.info(
            "Saved the trained model to %s after %.1f minutes.",
            paths.model,
            (time.monotonic() - start) / 60,
        )
    # The backups go once the model is saved (every worker waits for the chief): a run
    # killed before keeps them, and its rerun restores them (no step left to train),
    # averages and saves the model. Deleted earlier, the rerun would train anew beside the
    # run's per-epoch weights (a worker without its backup, out of step with the others).
    sync_workers(strategy)
    if storage.exists(paths.backup + suffix):
        storage.rmtree(paths.backup + suffix)
    return history
