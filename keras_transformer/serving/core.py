"""The server's core: every model's manager, and the requests both front ends make of them.

``ServerCore`` answers in TF Serving's terms (its messages, its status codes, and the
``tensorflow_serving.apis`` protos for status and metadata), so the REST app and the gRPC
service only translate: a request that fails over one fails over the other with the same
code and message. It also holds the server's :class:`ServingMetrics`, which both front ends
record their requests in.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keras_transformer.serving.batching_config import BatchOptions
from keras_transformer.serving.config import (
    ConfigError,
    ModelConfig,
    label_unavailable_message,
    read_model_server_config,
)
from keras_transformer.serving.errors import ServingStatusError, invalid, not_found
from keras_transformer.serving.manager import LoadRetries, ModelManager, log_poll_error
from keras_transformer.serving.monitoring import ServingMetrics, elapsed_usec
from keras_transformer.serving.poller import Poller
from keras_transformer.serving.servable import DEFAULT_SIGNATURE, Servable, SessionOptions

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BATCH_SIZE = 512


class ServerCore:
    """The models of one server.

    Args:
        models: the models (unique names).
        session_options: how versions' sessions are made and run.
        batching: batching parameters, or None (``--enable_batching`` off).
        poll_interval: seconds between scans of the base paths (<= 0: load once).
        max_request_batch_size: most rows (first-dim entries) one request may carry.
        allow_version_labels_for_unavailable_models: TF Serving's flag: a config may give a
            new label a version that is not AVAILABLE yet (moving a label still needs one).
        config_file: the ``--model_config_file`` the models came from, reloaded every
            ``config_poll_interval`` seconds (``--model_config_file_poll_wait_seconds``;
            <= 0: never, TF Serving's default).
        config_poll_interval: see ``config_file``.
        load_retries: how a failed load is retried (``--max_num_load_retries``,
            ``--load_retry_interval_micros``; TF Serving's defaults when None).

    Example (not run as a doctest: it needs an export on disk):

    ```python
    core = ServerCore([single_model_config("toy", "/models/toy")])
    core.start()
    core.status("toy")
    ```
    """

    def __init__(
        self,
        models: Sequence[ModelConfig],
        session_options: SessionOptions | None = None,
        batching: BatchOptions | None = None,
        poll_interval: float = 1.0,
        max_request_batch_size: int = DEFAULT_MAX_REQUEST_BATCH_SIZE,
        allow_version_labels_for_unavailable_models: bool = False,
        config_file: str | os.PathLike[str] | None = None,
        config_poll_interval: float = 0.0,
        load_retries: LoadRetries | None = None,
    ) -> None:
        _check_names(models)
        if max_request_batch_size < 1:
            raise ValueError(f"max_request_batch_size must be >= 1, got {max_request_batch_size}")
        self.max_request_batch_size = int(max_request_batch_size)
        self.allow_version_labels_for_unavailable_models = bool(
            allow_version_labels_for_unavailable_models
        )
        self._session_options = session_options
        self._batching = batching
        self._load_retries = load_retries
        # Replaced whole by a reload, so a reader always sees one config's models.
        self.managers = {
            m.name: ModelManager(m, session_options, batching, load_retries) for m in models
        }
        self._removed: dict[str, ModelManager] = {}
        self._reload_lock = threading.Lock()
        self._poll_interval = float(poll_interval)
        self._closing = threading.Event()  # set by close(): a reload stops waiting
        self._pollers = [Poller(self.refresh, poll_interval, "version-poll")]
        if config_file is not None:
            self._pollers.append(
                Poller(
                    lambda: self.reload_config_file(config_file),
                    config_poll_interval,
                    "config-poll",
                )
            )
        self.metrics = ServingMetrics()

    def start(self) -> None:
        """Load the current versions (synchronously), then start the polls."""
        self.refresh()
        for manager in self.managers.values():
            try:
                manager.states()
            except ServingStatusError:
                logger.warning(
                    "model %s: no servable version under %s yet",
                    manager.name,
                    manager.config.base_path,
                )
        for poller in self._pollers:
            poller.start()

    def refresh(self) -> None:
        """Scan every base path now (what the version poll does each interval)."""
        poll(list(self.managers.values()))

    def reload_config(self, models: Sequence[ModelConfig]) -> None:
        """Apply a new model list, as TF Serving's ``ServerCore::ReloadConfig`` does.

        The labels are checked first (:func:`check_version_labels`); a refused config changes
        nothing, so a config that moves a label to a version it also adds is refused on every
        try: add the version in one edit, move the label once it is AVAILABLE. Then the others
        take their new version policy and labels, models gone from the config are unloaded in
        the background (each version once its requests in flight are done; this call does not
        wait for them), and the base paths are polled, unless polling is off
        (``poll_interval <= 0``: as TF Serving's ``FileSystemStoragePathSource::UpdateConfig``,
        a reload changes the config only). Last, this call waits for each model new to the
        config, with no time limit, until one of its versions is AVAILABLE or has failed
        (``ServerCore::WaitUntilModelsAvailable``): with polling off a new model never loads,
        and the call never returns, as in TF Serving. The new config stays applied even
        when this call fails.

        Raises:
            ServingStatusError: FAILED_PRECONDITION for a label TF Serving would refuse;
                UNKNOWN "N model(s) did not become available: ..." when a new model's first
                version to end its load failed; CANCELLED when the server closes meanwhile.
            ValueError: a name listed twice.
        """
        _check_names(models)
        with self._reload_lock:
            current = self.managers
            check_version_labels(models, current, self.allow_version_labels_for_unavailable_models)
            managers = {}
            added = []
            for model in models:
                manager = current.get(model.name)
                if manager is None:
                    self._removed.pop(model.name, None)
                    manager = ModelManager(
                        model, self._session_options, self._batching, self._load_retries
                    )
                    added.append(manager)
                manager.config = model
                managers[model.name] = manager
            self.managers = managers
            for name, manager in current.items():
                if name not in managers:
                    logger.info("model %s: removed from the config; unloading", name)
                    self._removed[name] = manager
                    _unload_in_background(manager)
            if self._poll_interval > 0:
                poll(list(managers.values()))
            self._wait_until_models_available(added)

    def _wait_until_models_available(self, added: Sequence[ModelManager]) -> None:
        # ServerCore::WaitUntilModelsAvailable: a ServableRequest::Latest per new model is
        # done when any of its versions is AVAILABLE or END (the first to get there).
        failed = []
        for manager in added:
            settled = manager.wait_until_settled(self._closing)
            if settled is None:
                raise ServingStatusError("CANCELLED", "ReloadConfig cancelled: server closing")
            version, state = settled
            if state.state != "AVAILABLE":
                error = ""
                if state.error_code != "OK":
                    error = f" due to error: {state.error_code}: {state.error_message}"
                failed.append((manager.name, version, error))
        if failed:
            entries = "".join(
                f"{{{{name: {name} version: {version}}}{error}}}, "
                for name, version, error in sorted(failed)
            )
            raise ServingStatusError(
                "UNKNOWN", f"{len(failed)} model(s) did not become available: {{{entries}}}"
            )

    def reload_config_file(self, path: str | os.PathLike[str]) -> None:
        """Read ``path`` and apply it, as TF Serving's ``PollFilesystemAndReloadConfig``: a file
        that does not parse or a config that is refused is logged (TF Serving's words) and
        the models keep their current config."""
        try:
            models = read_model_server_config(path)
        except ConfigError as e:
            logger.error("Failed to read ModelServerConfig file: %s", e)
            return
        try:
            self.reload_config(models)
        except (ServingStatusError, ValueError) as e:
            message = e.message if isinstance(e, ServingStatusError) else str(e)
            logger.error("PollFilesystemAndReloadConfig failed to ReloadConfig: %s", message)

    def close(self) -> None:
        """Stop watching and unload every version."""
        self._closing.set()
        for manager in self.managers.values():
            manager.cancel_loads()  # a poll retrying a load gives up, so the poller stops
        for poller in self._pollers:
            poller.stop()
        for manager in self.managers.values():
            manager.close()

    def manager(
        self, name: str, version: int | None = None, for_status: bool = False
    ) -> ModelManager:
        """The manager of ``name`` (NOT_FOUND in TF Serving's words when there is none)."""
        if not name and not for_status:
            raise invalid("ModelSpec has no name specified.")
        manager = self.managers.get(name)
        if manager is None and for_status:
            manager = self._removed.get(name)
        if manager is None:
            if for_status:  # get_model_status_impl.cc (which has no check of the name)
                if version is not None:
                    raise not_found(f"Could not find version {version} of model {name}")
                raise not_found(f"Could not find any versions of model {name}")
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise not_found(f"Servable not found for request: {spec}")
        return manager

    def servable(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable of a model spec, acquired: ``release()`` it when done. A label is
        resolved first, as ``ServerCore::ServableRequestFromModelSpec`` does: an unknown
        model's label is an unknown label (INVALID_ARGUMENT), not NOT_FOUND."""
        if label is not None and name and name not in self.managers:
            raise invalid(f"Unrecognized servable version label: {label}")
        return self.manager(name, version).get(version, label, acquire=True)

    def predict(
        self,
        servable: Servable,
        signature_name: str,
        arrays: Mapping[str, np.ndarray],
        output_filter: Sequence[str] = (),
        timeout_ms: int = 0,
    ) -> dict[str, np.ndarray]:
        """Run a predict request on an acquired servable (``timeout_ms``: its session-run
        timeout, 0 for none)."""
        rows = max((a.shape[0] for a in arrays.values() if a.ndim), default=1)
        if rows > self.max_request_batch_size:
            raise invalid(
                f"Request batch size {rows} exceeds the limit of {self.max_request_batch_size} "
                "(--max_request_batch_size)"
            )
        start = time.monotonic_ns()
        outputs = servable.predict(
            signature_name or DEFAULT_SIGNATURE, arrays, output_filter, timeout_ms
        )
        self.metrics.record_runtime(servable.name, "Predict", elapsed_usec(start))
        return outputs

    def classify(self, servable: Servable, request: Any, timeout_ms: int = 0) -> Any:
        """Run a ``ClassificationRequest`` on an acquired servable (``classifier.py``, after
        TF Serving's ``RunClassify``): the ``ClassificationResponse``; ``timeout_ms`` as for
        :meth:`predict`."""
        from keras_transformer.serving.classifier import run_classify

        def run(servable: Servable, signature: str, arrays: Any, outputs: Sequence[str]) -> dict:
            return self.predict(servable, signature, arrays, outputs, timeout_ms)

        return run_classify(servable, request, run)

    def status(self, name: str, version: int | None = None, label: str | None = None) -> Any:
        """``GetModelStatusResponse`` for a model or one of its versions; with a label (known
        or not), every version, as TF Serving answers (``get_model_status_impl.cc`` reads only
        the version)."""
        from tensorflow_serving.apis import get_model_status_pb2

        # As GetModelStatusImpl: a label selects nothing, the answer is every version.
        del label
        manager = self.manager(name, version, for_status=True)
        response = get_model_status_pb2.GetModelStatusResponse()
        for number, state in sorted(manager.states(version).items(), reverse=True):
            entry = response.model_version_status.add(version=number)
            entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(state.state)
            entry.status.error_code = (
                entry.status.DESCRIPTOR.fields_by_name["error_code"]
                .enum_type.values_by_name[state.error_code]
                .number
            )
            entry.status.error_message = state.error_message
        return response

    def metadata(self, servable: Servable) -> Any:
        """``GetModelMetadataResponse`` (the ``signature_def`` field) of an acquired servable."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = servable.name
        response.model_spec.version.value = servable.version
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature in servable.signatures.items():
            signature_map.signature_def[key].CopyFrom(signature)
        response.metadata["signature_def"].Pack(signature_map)
        return response

    def batching_stats(self, name: str) -> dict[str, int]:
        """How many merged session runs answered how many requests (``--enable_batching``)."""
        return self.manager(name, for_status=True).batching_stats()


def _unload_in_background(manager: ModelManager) -> None:
    # As TF Serving, removing a model only un-aspires its versions
    # (FileSystemStoragePathSource::UnaspireServables); the manager's own thread unloads
    # them, each once its last handle is released (BasicManager::ExecuteUnload).
    manager.cancel_loads()
    thread = threading.Thread(target=manager.close, name=f"unload-{manager.name}", daemon=True)
    thread.start()


def poll(managers: Sequence[ModelManager]) -> None:
    """List every model's base path, then apply each model's aspired versions.

    As TF Serving's ``FileSystemStoragePathSource::PollFileSystemAndInvokeCallback``: when
    any base path is missing or cannot be listed, the whole poll fails (logged in TF
    Serving's words) and no model changes, not even those whose base paths were listed.
    """
    try:
        aspired = [(manager, manager.list_versions()) for manager in managers]
    except OSError as e:
        log_poll_error(e)
        return
    for manager, versions in aspired:
        manager.apply(versions)


def _check_names(models: Sequence[ModelConfig]) -> None:
    """Unique names, as ``ValidateModelConfigList`` (``server_core.cc``); none is allowed."""
    names = [m.name for m in models]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"Illegal to list model {name} multiple times in config list")


def check_version_labels(
    models: Sequence[ModelConfig],
    managers: Mapping[str, ModelManager],
    allow_unavailable: bool,
) -> None:
    """TF Serving's rule for a config's labels (``ServerCore::UpdateModelVersionLabelMap``).

    A label must point at an AVAILABLE version, except, with
    ``--allow_version_labels_for_unavailable_models``, a label that is new or keeps its
    version: moving an existing label always needs the target loaded.

    Args:
        models: the new config's models.
        managers: the models being served now, by name.
        allow_unavailable: the flag.

    Raises:
        ServingStatusError: FAILED_PRECONDITION with TF Serving's message.
    """
    for model in models:
        manager = managers.get(model.name)
        old_labels = manager.config.version_labels if manager is not None else {}
        for label, version in model.version_labels.items():
            moved = label in old_labels and old_labels[label] != version
            if allow_unavailable and not moved:
                continue
            states = manager.states_or_empty() if manager is not None else {}
            state = states.get(version)
            if state is None or state.state != "AVAILABLE":
                raise ServingStatusError(
                    "FAILED_PRECONDITION", label_unavailable_message(model.name, version)
                )
