"""Model versions: found on disk, loaded, labelled, unloaded; and the thread that polls.

Each model's base path holds integer version directories. Its version policy (``latest``,
``all``, ``specific``) says which ones to serve; a directory without ``saved_model.pb`` is not a
version yet (write exports elsewhere and ``mv`` them in). As with TF Serving's
``AvailabilityPreservingPolicy``, a version that leaves the policy is unloaded only once a new
one is AVAILABLE, and it waits for the requests that hold it. A version that fails to load is
reported (state END with its error) and retried when its ``saved_model.pb`` changes.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import threading
from collections.abc import Callable, Iterable

from keras_transformer import storage
from keras_transformer.serving.batcher import STATS_KEYS, BatchScheduler
from keras_transformer.serving.batching_config import BatchOptions
from keras_transformer.serving.config import ModelConfig
from keras_transformer.serving.errors import code_name_of, invalid, not_found
from keras_transformer.serving.servable import Servable, SessionOptions, is_complete_saved_model

logger = logging.getLogger(__name__)

_ERROR_MESSAGE_LIMIT = 2000


@dataclasses.dataclass
class VersionState:
    """A version's ``ModelVersionStatus``: state name, error code name and message."""

    state: str
    error_code: str = "OK"
    error_message: str = ""
    stamp: float | None = None  # saved_model.pb mtime of a failed load (retry when it changes)


def release_memory() -> None:
    """Free unloaded versions now. A version's ``tf.Graph`` is full of reference cycles, which
    only the cyclic collector frees, and its oldest generation runs rarely: without this, an
    unloaded version's graph stays in memory for an unbounded time after each swap."""
    gc.collect()


def _mtime(path: str) -> float | None:
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        try:
            return os.path.getmtime(os.path.join(path, name))
        except OSError:
            continue
    return None


class ModelManager:
    """The versions of one model.

    Args:
        config: the model's name, base path, version policy and labels.
        session_options: how each version's session is made.
        batching: batching parameters, or None for no batching.

    Example (not run as a doctest: it needs an export on disk):

    ```python
    manager = ModelManager(single_model_config("toy", "/models/toy"))
    manager.scan()
    manager.get().version  # 1
    ```
    """

    def __init__(
        self,
        config: ModelConfig,
        session_options: SessionOptions | None = None,
        batching: BatchOptions | None = None,
    ) -> None:
        self.config = config
        self._session_options = session_options or SessionOptions()
        self._batching = batching
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._servables: dict[int, Servable] = {}
        self._states: dict[int, VersionState] = {}
        self._closed = False  # closed managers never load again (a scan may race a reload)

    @property
    def name(self) -> str:
        return self.config.name

    def _version_dirs(self) -> dict[int, str]:
        base = self.config.base_path
        try:
            entries = storage.listdir(base)
        except OSError as e:
            logger.warning("model %s: cannot list base path %s: %s", self.name, base, e)
            return {}
        found = {}
        for entry in entries:
            path = os.path.join(base, entry)
            if entry.isdigit() and storage.isdir(path) and is_complete_saved_model(path):
                found[int(entry)] = path
        return found

    def _aspired(self, available: Iterable[int]) -> list[int]:
        kind, arg = self.config.version_policy
        versions = sorted(available, reverse=True)
        if kind == "all":
            return versions
        if kind == "specific":
            return [v for v in versions if v in arg]
        return versions[: max(1, int(arg))]

    def scan(self) -> None:
        """Load the aspired versions that are new; unload the ones no longer aspired."""
        with self._scan_lock:
            if self._closed:
                return
            available = self._version_dirs()
            aspired = self._aspired(available)
            for version in aspired:
                if version in self._servables:
                    continue
                stamp = _mtime(available[version])
                previous = self._states.get(version)
                if previous is not None and previous.state == "END" and previous.stamp == stamp:
                    continue  # failed before and unchanged since
                self._load(version, available[version], stamp)
            loaded_aspired = [v for v in aspired if v in self._servables]
            with self._lock:
                current = dict(self._servables)
            unloaded = False
            for version, servable in current.items():
                gone = version not in available
                if gone or (version not in aspired and loaded_aspired):
                    with self._lock:
                        del self._servables[version]
                        self._states[version] = VersionState("UNLOADING")
                    servable.close()
                    with self._lock:
                        self._states[version] = VersionState("END")
                    logger.info("model %s: unloaded version %d", self.name, version)
                    unloaded = True
            if unloaded:
                del current, servable
                release_memory()

    def _load(self, version: int, path: str, stamp: float | None) -> None:
        with self._lock:
            self._states[version] = VersionState("LOADING")
        logger.info("model %s: loading version %d from %s", self.name, version, path)
        try:
            servable = Servable(self.name, version, path, self._session_options)
        except Exception as e:  # a broken export must not take the server down
            logger.error("model %s: failed to load version %d: %s", self.name, version, e)
            message = str(e).strip()[:_ERROR_MESSAGE_LIMIT]
            with self._lock:
                self._states[version] = VersionState("END", code_name_of(e), message, stamp)
            return
        if self._batching is not None:
            servable.batcher = BatchScheduler(servable.run, self._batching, servable.signatures)
        with self._lock:
            self._servables[version] = servable
            self._states[version] = VersionState("AVAILABLE")
        logger.info("model %s: version %d is AVAILABLE", self.name, version)

    def label_version(self, label: str) -> int:
        """The version a label points at (INVALID_ARGUMENT for an unknown label)."""
        if label not in self.config.version_labels:
            raise invalid(f"Unrecognized servable version label: {label}")
        return self.config.version_labels[label]

    def get(
        self, version: int | None = None, label: str | None = None, acquire: bool = False
    ) -> Servable:
        """The servable of a version or label (the latest by default).

        With ``acquire`` the servable is counted in use (``release()`` it when done), so an
        unload waits for the request instead of closing the session under it.
        """
        if label is not None:
            version = self.label_version(label)
        with self._lock:
            if version is None:
                if not self._servables:
                    raise not_found(f"Servable not found for request: Latest({self.name})")
                servable = self._servables[max(self._servables)]
            else:
                servable = self._servables.get(version)
                if servable is None:
                    raise not_found(
                        f"Servable not found for request: Specific({self.name}, {version})"
                    )
            if acquire:
                servable.acquire()
        return servable

    def states(self, version: int | None = None) -> dict[int, VersionState]:
        """The states of all versions seen, or of one (NOT_FOUND as TF Serving says it)."""
        states = self.states_or_empty()
        if version is not None:
            if version not in states:
                raise not_found(f"Could not find version {version} of model {self.name}")
            return {version: states[version]}
        if not states:
            raise not_found(f"Could not find any versions of model {self.name}")
        return states

    def states_or_empty(self) -> dict[int, VersionState]:
        """The states of all versions seen (empty before any)."""
        with self._lock:
            return dict(self._states)

    def batching_stats(self) -> dict[str, int]:
        """The loaded batchers' counts summed (``BatchScheduler.stats``: ``batches``,
        ``failed_batches``, ``tasks``, ``pieces``, ``padding_rows``)."""
        total = dict.fromkeys(STATS_KEYS, 0)
        with self._lock:
            batchers = [s.batcher for s in self._servables.values() if s.batcher is not None]
        for batcher in batchers:
            for key, value in batcher.stats.items():
                total[key] += value
        return total

    def close(self) -> None:
        """Unload every version (each waits for its requests in flight); their states become
        END, as TF Serving reports the versions of a model removed from its config."""
        with self._scan_lock, self._lock:
            self._closed = True
            servables = dict(self._servables)
            self._servables.clear()
            for version in servables:
                self._states[version] = VersionState("UNLOADING")
        for version, servable in servables.items():
            servable.close()
            with self._lock:
                self._states[version] = VersionState("END")


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
