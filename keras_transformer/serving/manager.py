"""Model versions: found on disk, loaded, labelled, unloaded.

Each model's base path holds integer version directories. Its version policy (``latest``,
``all``, ``specific``) says which ones to serve; as in TF Serving, every numbered directory is a
version, so one without ``saved_model.pb`` yet fails to load and is retried
(``LoadRetries``; write exports elsewhere and ``mv`` them in, or copy the graph last). As TF
Serving's ``AspiredVersionsManager`` with its ``AvailabilityPreservingPolicy``, a version that
leaves the policy is unloaded only once an aspired one is AVAILABLE (or none is aspired), and
it waits for the requests that hold it. A version whose tries all fail is reported (state END
with its error) and tried again when its ``saved_model.pb`` changes. A base path that cannot be
listed changes nothing (``ServerCore``'s poll then fails for every model, as TF Serving's does).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable

from keras_transformer import storage
from keras_transformer.serving.batcher import STATS_KEYS, BatchScheduler
from keras_transformer.serving.batching_config import BatchOptions
from keras_transformer.serving.config import ModelConfig
from keras_transformer.serving.errors import code_name_of, invalid, not_found
from keras_transformer.serving.harness import (
    ERROR_MESSAGE_LIMIT,
    Harness,
    LoadRetries,
    VersionState,
    graph_mtime,
    log_poll_error,
    release_memory,
)
from keras_transformer.serving.servable import Servable, SessionOptions

logger = logging.getLogger(__name__)


class ModelManager:
    """The versions of one model.

    Args:
        config: the model's name, base path, version policy and labels.
        session_options: how each version's session is made.
        batching: batching parameters, or None for no batching.
        retries: how a failed load is retried (TF Serving's defaults: 5 times, 1 min apart).

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
        retries: LoadRetries | None = None,
    ) -> None:
        self.config = config
        self._session_options = session_options or SessionOptions()
        self._batching = batching
        self._retries = retries or LoadRetries()
        self._cancel = threading.Event()  # set by close(): a load stops retrying
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._servables: dict[int, Servable] = {}
        self._states: dict[int, VersionState] = {}
        self._managed: dict[int, Harness] = {}  # guarded by _scan_lock
        self._pending: dict[int, str] | None = None  # a postponed aspired-versions list
        self._closed = False  # closed managers never load again (a scan may race a reload)
        self._settled = threading.Condition(self._lock)
        self._first_settled: tuple[int, VersionState] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def list_versions(self) -> dict[int, str]:
        """The versions under the base path that the version policy aspires, by number.

        As ``PollFileSystemForServable`` (``file_system_storage_path_source.cc``): a base path
        that does not exist, or cannot be listed, is an error, never an empty list, so that a
        missing (or transiently unavailable) base path unloads nothing.

        Raises:
            OSError: TF Serving's "Could not find base path ..." or the listing's error.
        """
        base = self.config.base_path
        if not storage.exists(base):
            raise FileNotFoundError(
                f"Could not find base path {base} for servable {self.name} with error "
                f"NOT_FOUND: {base} not found"
            )
        found = {}
        # Every child whose name is a number is a version (IndexChildrenByVersion), complete
        # or not: one without saved_model.pb fails to load (NOT_FOUND) and is retried.
        for entry in sorted(e.rstrip("/") for e in storage.listdir(base)):
            if entry.isdigit():
                found[int(entry)] = os.path.join(base, entry)
        return {v: found[v] for v in self._aspired(found)}

    def _aspired(self, available: Iterable[int]) -> list[int]:
        kind, arg = self.config.version_policy
        versions = sorted(available, reverse=True)
        if kind == "all":
            return versions
        if kind == "specific":
            return [v for v in versions if v in arg]
        return versions[: max(1, int(arg))]

    def scan(self) -> None:
        """Poll this model's base path and apply its aspired versions (a failed listing is
        logged and changes nothing)."""
        try:
            aspired = self.list_versions()
        except OSError as e:
            log_poll_error(e)
            return
        self.apply(aspired)

    def apply(self, aspired: dict[int, str]) -> None:
        """Serve the aspired versions (number to folder), as TF Serving's
        ``AspiredVersionsManager`` with its default ``AvailabilityPreservingPolicy``.

        Versions new to the list are loaded, highest first. A version no longer aspired is
        unloaded only while some aspired version is AVAILABLE, or when none is aspired, or
        when it is one of several unaspired AVAILABLE versions (the lowest goes first), so a
        version that nothing can replace keeps serving. A version that failed stays failed
        while it is aspired (retried here when its ``saved_model.pb`` changes); one that
        leaves the list is forgotten, so it is loaded again if it is aspired again.
        """
        with self._scan_lock:
            if self._closed:
                return
            self._pending = dict(aspired)
            unloaded = False
            while True:
                self._flush()
                if self._pending is not None and not self._reaspires(self._pending):
                    self._process(self._pending)
                    self._pending = None
                action = self._next_action()
                if action is None:
                    break
                kind, version = action
                if kind == "load":
                    self._load(version)
                else:
                    self._unload(version)
                    unloaded = True
            if unloaded:
                release_memory()

    def _flush(self) -> None:
        # FlushServables: versions unaspired and not loaded (new, unloaded, failed) are
        # no longer managed; their last state stays reported.
        for version, harness in list(self._managed.items()):
            if not harness.aspired and harness.state != "ready":
                del self._managed[version]

    def _reaspires(self, aspired: dict[int, str]) -> bool:
        # HandlePendingAspiredVersionsRequests postpones a request that re-aspires a version
        # still managed as unaspired (it waits for it to be unloaded first).
        return any(v in aspired and not h.aspired for v, h in self._managed.items())

    def _process(self, aspired: dict[int, str]) -> None:
        # ProcessAspiredVersionsRequest.
        for version, harness in self._managed.items():
            if version not in aspired:
                harness.aspired = False
        for version, path in aspired.items():
            harness = self._managed.get(version)
            if harness is not None and harness.state == "error":
                if graph_mtime(path) == harness.stamp:
                    continue  # failed before and unchanged since
                harness = None  # changed since it failed: a new version again
            if harness is None:
                self._managed[version] = Harness(path)

    def _next_action(self) -> tuple[str, int] | None:
        # AvailabilityPreservingPolicy::GetNextAction.
        aspired = [v for v, h in self._managed.items() if h.aspired]
        aspired_ready = [v for v in aspired if self._managed[v].state == "ready"]
        unaspired_ready = [
            v for v, h in self._managed.items() if not h.aspired and h.state == "ready"
        ]
        if unaspired_ready and (not aspired or aspired_ready or len(unaspired_ready) > 1):
            return ("unload", min(unaspired_ready))
        new = [v for v in aspired if self._managed[v].state == "new"]
        if new:
            return ("load", max(new))
        return None

    def _unload(self, version: int) -> None:
        self._managed[version].state = "disabled"
        with self._lock:
            servable = self._servables.pop(version)
            self._states[version] = VersionState("UNLOADING")
        servable.close()
        del servable
        with self._lock:
            self._states[version] = VersionState("END")
        logger.info("model %s: unloaded version %d", self.name, version)

    def _load(self, version: int) -> None:
        harness = self._managed[version]
        path = harness.path
        harness.stamp = graph_mtime(path)
        with self._lock:
            self._states[version] = VersionState("LOADING")
        logger.info("model %s: loading version %d from %s", self.name, version, path)
        try:
            servable = self._load_with_retries(version, path)
        except Exception as e:  # a broken export must not take the server down
            message = str(e).strip()[:ERROR_MESSAGE_LIMIT]
            harness.state = "error"
            self._settle(version, VersionState("END", code_name_of(e), message))
            return
        if self._batching is not None:
            servable.batcher = BatchScheduler(servable.run, self._batching, servable.signatures)
        harness.state = "ready"
        with self._lock:
            self._servables[version] = servable
        self._settle(version, VersionState("AVAILABLE"))
        logger.info("model %s: version %d is AVAILABLE", self.name, version)

    def _load_with_retries(self, version: int, path: str) -> Servable:
        # LoaderHarness::Load with Retry (util/retrier.cc): a version still being copied
        # (saved_model.pb comes last) loads on a later try. Like TF Serving's loads without
        # --num_load_threads, the tries run in the polling thread, which waits between them.
        what = f"Loading servable: {{name: {self.name} version: {version}}}"
        retries = self._retries.max_num_load_retries
        interval = max(self._retries.load_retry_interval_micros, 0) / 1e6
        for tries in range(retries + 1):
            if tries:
                if self._cancel.wait(interval):
                    logger.info("Retrying of %s was cancelled.", what)
                    break
                logger.info("Retrying of %s retry: %d", what, tries)
            try:
                return Servable(self.name, version, path, self._session_options)
            except Exception as e:
                logger.error("%s failed: %s", what, e)
                error = e
        else:
            if retries:
                logger.info("Retrying of %s exhausted max_num_retries: %d", what, retries)
        raise error

    def _settle(self, version: int, state: VersionState) -> None:
        with self._lock:
            self._states[version] = state
            if self._first_settled is None:
                self._first_settled = (version, state)
                self._settled.notify_all()

    def wait_until_settled(self, stop: threading.Event) -> tuple[int, VersionState] | None:
        """The first version of this manager to end a load, AVAILABLE or END, and its state;
        waits as long as that takes, as ``ServerCore::WaitUntilModelsAvailable`` waits for
        ``ServableRequest::Latest`` (``servable_state_waiter_timeout``: infinite). None once
        ``stop`` is set."""
        with self._settled:
            while self._first_settled is None:
                if stop.is_set():
                    return None
                self._settled.wait(0.1)
            return self._first_settled

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

    def cancel_loads(self) -> None:
        """Stop retrying failed loads, now and from now on (the model is going away)."""
        self._cancel.set()

    def close(self) -> None:
        """Unload every version (each waits for its requests in flight); their states become
        END, as TF Serving reports the versions of a model removed from its config."""
        self.cancel_loads()
        with self._scan_lock, self._lock:
            self._closed = True
            servables = dict(self._servables)
            self._servables.clear()
            self._managed.clear()
            for version in servables:
                self._states[version] = VersionState("UNLOADING")
        for version, servable in servables.items():
            servable.close()
            with self._lock:
                self._states[version] = VersionState("END")
