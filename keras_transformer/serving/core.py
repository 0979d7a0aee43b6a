"""The server's core: every model's manager, and the requests both front ends make of them.

``ServerCore`` answers in TF Serving's terms (its messages, its status codes, and the
``tensorflow_serving.apis`` protos for status and metadata), so the REST app and the gRPC
service only translate: a request that fails over one fails over the other with the same
code and message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keras_transformer.serving.config import BatchOptions, ModelConfig
from keras_transformer.serving.errors import ServingStatusError, invalid, not_found
from keras_transformer.serving.manager import ModelManager, VersionWatcher
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
    ) -> None:
        names = [m.name for m in models]
        if not models or len(set(names)) != len(names):
            raise ValueError(f"Need at least one model and unique model names, got {names}")
        if max_request_batch_size < 1:
            raise ValueError(f"max_request_batch_size must be >= 1, got {max_request_batch_size}")
        self.max_request_batch_size = int(max_request_batch_size)
        self.managers = {m.name: ModelManager(m, session_options, batching) for m in models}
        self._watcher = VersionWatcher(self.managers.values(), poll_interval)

    def start(self) -> None:
        """Load the current versions (synchronously), then start the version watcher."""
        self._watcher.scan()
        for manager in self.managers.values():
            try:
                manager.states()
            except ServingStatusError:
                logger.warning(
                    "model %s: no servable version under %s yet",
                    manager.name,
                    manager.config.base_path,
                )
        self._watcher.start()

    def refresh(self) -> None:
        """Scan every base path now (what the watcher does each interval)."""
        self._watcher.scan()

    def close(self) -> None:
        """Stop watching and unload every version."""
        self._watcher.stop()
        for manager in self.managers.values():
            manager.close()

    def manager(
        self, name: str, version: int | None = None, for_status: bool = False
    ) -> ModelManager:
        """The manager of ``name`` (NOT_FOUND in TF Serving's words when there is none)."""
        if not name:
            raise invalid("ModelSpec has no name specified.")
        manager = self.managers.get(name)
        if manager is None:
            if for_status:
                raise not_found(f"Could not find any versions of model {name}")
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise not_found(f"Servable not found for request: {spec}")
        return manager

    def servable(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable of a model spec, acquired: ``release()`` it when done."""
        return self.manager(name, version).get(version, label, acquire=True)

    def predict(
        self,
        servable: Servable,
        signature_name: str,
        arrays: Mapping[str, np.ndarray],
        output_filter: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        """Run a predict request on an acquired servable."""
        rows = max((a.shape[0] for a in arrays.values() if a.ndim), default=1)
        if rows > self.max_request_batch_size:
            raise invalid(
                f"Request batch size {rows} exceeds the limit of {self.max_request_batch_size} "
                "(--max_request_batch_size)"
            )
        return servable.predict(signature_name or DEFAULT_SIGNATURE, arrays, output_filter)

    def classify(self, servable: Servable, request: Any) -> Any:
        """Run a ``ClassificationRequest`` on an acquired servable (``classifier.py``, after
        TF Serving's ``RunClassify``): the ``ClassificationResponse``."""
        from keras_transformer.serving.classifier import run_classify

        return run_classify(servable, request, self.predict)

    def status(self, name: str, version: int | None = None, label: str | None = None) -> Any:
        """``GetModelStatusResponse`` for a model, one of its versions, or a label."""
        from tensorflow_serving.apis import get_model_status_pb2

        manager = self.manager(name, version, for_status=True)
        if label is not None:
            version = manager.label_version(label)
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
