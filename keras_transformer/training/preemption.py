"""`BackupOnTerminate`: a SIGTERM backs a run up at the end of its step before it ends it.

Kubernetes, Slurm and cloud spot machines send SIGTERM some seconds before they kill a
process (a pod's grace period is 30 s by default). Python's default for SIGTERM ends the
process at once, losing the steps since the last backup (up to `training.backup_freq`).
"""

from __future__ import annotations

import logging
import signal
import threading

import keras

from keras_transformer.training.callbacks import ResumableBackupAndRestore

logger = logging.getLogger(__name__)


class BackupOnTerminate(keras.callbacks.Callback):
    """On SIGTERM during `fit`, writes `backup`'s backup when the current step ends, then
    delivers the signal again to the handler that was there before (Python's default: the
    process ends, as the signal would have ended it). Place it after `backup`.

    One worker only: under multi-worker training each worker would back up at another step
    (the workers would have to agree on one), so `fit_and_save` leaves it out there. Signal
    handlers can only be set in the main thread; elsewhere it does nothing.

    Args:
        backup: the run's `ResumableBackupAndRestore`.

    Example (not run as a doctest: it trains a model):

    ```python
    backup = ResumableBackupAndRestore("runs/x/backup", save_freq=200, steps_per_epoch=1000)
    model.fit(data, epochs=20, steps_per_epoch=1000,
              callbacks=[backup, BackupOnTerminate(backup)])
    ```
    """

    def __init__(self, backup: ResumableBackupAndRestore):
        super().__init__()
        self.backup = backup
        self._received: int | None = None
        self._previous = None

    def on_train_begin(self, logs=None):
        self._received = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._receive)

    def _receive(self, signum, frame):
        self._received = signum
        logger.warning("Received SIGTERM: backing up when this step ends, then stopping.")

    def on_train_batch_end(self, batch, logs=None):
        if self._received is None:
            return
        self.backup.back_up()
        logger.warning("Backed up in %s; ending as SIGTERM asked.", self.backup.backup_dir)
        self._restore_handler()
        signal.raise_signal(signal.SIGTERM)

    def on_train_end(self, logs=None):
        self._restore_handler()

    def _restore_handler(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
