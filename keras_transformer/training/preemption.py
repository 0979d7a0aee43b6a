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
    """While its `with` block runs, a SIGTERM is held until the current training step ends;
    the callback then writes `backup`'s backup and delivers the signal again to the handler
    that was there before (Python's default: the process ends, as the signal would have
    ended it). Place it after `backup` among `fit`'s callbacks.

    One worker only: under multi-worker training each worker would back up at another step
    (the workers would have to agree on one), so `fit_and_save` leaves it out there. Signal
    handlers can only be set in the main thread; elsewhere the block changes nothing.

    Args:
        backup: the run's `ResumableBackupAndRestore`.

    Example (not run as a doctest: it trains a model):

    ```python
    backup = ResumableBackupAndRestore("runs/x/backup", save_freq=200, steps_per_epoch=1000)
    with BackupOnTerminate(backup) as on_terminate:
        model.fit(data, epochs=20, steps_per_epoch=1000, callbacks=[backup, on_terminate])
    ```
    """

    def __init__(self, backup: ResumableBackupAndRestore):
        super().__init__()
        self.backup = backup
        self._received = False
        self._installed = False
        self._previous = None

    def __enter__(self) -> BackupOnTerminate:
        self._received = False
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._receive)
            self._installed = True
        return self

    def __exit__(self, *exc_info) -> None:
        self._restore_handler()

    def _receive(self, signum, frame):
        self._received = True
        logger.warning("Received SIGTERM: backing up when this step ends, then stopping.")

    def on_train_batch_end(self, batch, logs=None):
        if not self._received:
            return
        self.backup.back_up()
        logger.warning("Backed up in %s; ending as SIGTERM asked.", self.backup.backup_dir)
        self._restore_handler()
        signal.raise_signal(signal.SIGTERM)

    def _restore_handler(self) -> None:
        if self._installed:
            # None: a handler set outside Python, which Python cannot set again.
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(signal.SIGTERM, previous)
            self._installed = False
