"""The background thread that polls: the base paths' versions, a config file's reloads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Poller:
    """Calls ``action`` every ``interval`` seconds in a background thread until stopped
    (``interval <= 0`` starts no thread); an exception is logged and the next call made.

    Args:
        action: what to do each interval (a scan of the base paths, a config file reload).
        interval: seconds between calls (``--file_system_poll_wait_seconds``,
            ``--model_config_file_poll_wait_seconds``).
        name: the thread's name, also in the log line of a failed call.
    """

    def __init__(self, action: Callable[[], None], interval: float, name: str) -> None:
        self._action = action
        self._interval = float(interval)
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._interval > 0:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._action()
            except Exception:
                logger.exception("%s failed", self._name)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
