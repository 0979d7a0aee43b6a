"""A development stand-in for TF Serving: its REST and gRPC APIs. It is *not* TF Serving.

It serves SavedModels the way ``tensorflow_model_server`` does, behind the same contracts, so
exports, clients and deployments can be developed and tested where the real server cannot
run (no Docker). Its parts, one idea each:

* ``config`` / ``batching_config``: ``--model_config_file`` / ``--batching_parameters_file`` /
  ``--monitoring_config_file`` read with ``google.protobuf.text_format`` into TF Serving's
  messages, checked as TF Serving checks them;
* ``servable`` / ``batcher`` / ``batch_merge``: a version loaded through the TF1 session loader
  and run by SignatureDef (TF Serving's XLA rule included), and dynamic batching with TF
  Serving's splitting, padding and allowed batch sizes, grouped by length;
* ``manager`` / ``core``: versions found, loaded, labelled and unloaded, and the requests both
  APIs make, answered with TF Serving's messages and status codes;
* ``codec`` / ``rest``: TF Serving's REST API on aiohttp;
* ``grpc_service``: ``PredictionService`` and ``ModelService`` with the generated stubs of
  ``tensorflow-serving-api``;
* ``monitoring``: TF Serving's request metrics, served as a Prometheus page on the REST port;
* ``cli``: ``tensorflow_model_server``'s flags.

Start it with ``keras-transformer serve --model_base_path BASE/NAME --model_name NAME`` (or
``python -m keras_transformer.serving`` with the same flags) or, from Python,
``with start_server("BASE/NAME", "NAME", port=0) as server: server.url``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from keras_transformer.serving.batching_config import BatchOptions, load_batching_parameters
from keras_transformer.serving.config import (
    ConfigError,
    ModelConfig,
    load_model_server_config,
    load_monitoring_config,
    single_model_config,
)
from keras_transformer.serving.core import DEFAULT_MAX_REQUEST_BATCH_SIZE, ServerCore
from keras_transformer.serving.grpc_service import GrpcServer
from keras_transformer.serving.manager import LoadRetries
from keras_transformer.serving.rest import DEFAULT_MAX_REQUEST_BYTES, RestServer
from keras_transformer.serving.servable import SessionOptions

logger = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0
DEFAULT_SHUTDOWN_SECONDS = 30.0
# TF Serving's default for --rest_api_num_threads and --grpc_max_threads: 4 per CPU.
DEFAULT_THREADS = 4 * (os.cpu_count() or 1)

__all__ = ["BatchOptions", "ConfigError", "ModelConfig", "ServingServer", "start_server"]


class ServingServer:
    """The stand-in: the models, the REST endpoint and the gRPC endpoint.

    Create it with :func:`start_server`; ``url`` (REST) and ``grpc_target`` give the bound
    addresses, ``metrics_path`` the Prometheus page's path on the REST port (None when
    not served). Use it as a context manager or call :meth:`stop`, which stops listening and
    answers the requests in flight before unloading the models.
    """

    def __init__(
        self,
        core: ServerCore,
        *,
        host: str = "127.0.0.1",
        rest_port: int | None = 0,
        grpc_port: int | None = 0,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        rest_threads: int = DEFAULT_THREADS,
        grpc_threads: int = DEFAULT_THREADS,
        shutdown_seconds: float = DEFAULT_SHUTDOWN_SECONDS,
        metrics_path: str | None = None,
        rest_api_timeout_ms: int = 0,
        enforce_session_run_timeout: bool = True,
        rest_api_enable_cors_support: bool = False,
    ) -> None:
        if rest_port is None and grpc_port is None:
            raise ValueError("Enable at least one of REST (rest_port) and gRPC (grpc_port)")
        if rest_port and grpc_port and rest_port == grpc_port:
            raise ValueError(f"The REST and gRPC ports must differ, both are {rest_port}")
        self.core = core
        self.host = host
        self._shutdown_seconds = shutdown_seconds
        self._rest = (
            RestServer(
                core,
                host,
                rest_port,
                max_request_bytes,
                rest_threads,
                shutdown_seconds,
                metrics_path,
                rest_api_timeout_ms,
                rest_api_enable_cors_support,
            )
            if rest_port is not None
            else None
        )
        self._grpc_options = (
            grpc_port,
            max_request_bytes,
            grpc_threads,
            enforce_session_run_timeout,
        )
        self._grpc: GrpcServer | None = None
        self.metrics_path = metrics_path if rest_port is not None else None

    def start(self) -> ServingServer:
        """Load the current versions (synchronously), then listen."""
        self.core.start()
        grpc_port, max_bytes, grpc_threads, enforce_timeout = self._grpc_options
        if grpc_port is not None:
            self._grpc = GrpcServer(
                self.core, self.host, grpc_port, max_bytes, grpc_threads, enforce_timeout
            )
            self._grpc.start()
            logger.info("Running gRPC ModelServer at %s:%d ...", self.host, self._grpc.port)
        if self._rest is not None:
            self._rest.start()
            logger.info("Exporting HTTP/REST API at:%s:%d ...", self.host, self._rest.port)
            if self.metrics_path is not None:
                logger.info("Prometheus metrics at %s%s", self.url, self.metrics_path)
        return self

    def stop(self) -> None:
        """Stop listening, answer the requests in flight, then unload the models."""
        grpc_stopped = None
        if self._grpc is not None:  # both APIs stop listening at once, then drain
            grpc_stopped = self._grpc.stop(self._shutdown_seconds)
            self._grpc = None
        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        if grpc_stopped is not None:
            grpc_stopped.wait(self._shutdown_seconds + 10)
        self.core.close()

    def __enter__(self) -> ServingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The REST port."""
        if self._rest is None or not self._rest.port:
            raise RuntimeError("REST is not being served")
        return self._rest.port

    @property
    def url(self) -> str:
        """The REST root, e.g. ``http://127.0.0.1:8501``."""
        return f"http://{self.host}:{self.port}"

    @property
    def grpc_port(self) -> int:
        if self._grpc is None:
            raise RuntimeError("gRPC is not being served")
        return self._grpc.port

    @property
    def grpc_target(self) -> str:
        """The gRPC address, e.g. ``127.0.0.1:8500`` (for ``grpc.insecure_channel``)."""
        return f"{self.host}:{self.grpc_port}"

    def refresh(self) -> None:
        """Scan every base path now (what the background poll does each interval)."""
        self.core.refresh()

    def reload_config_file(self, path: str | os.PathLike[str]) -> None:
        """Reload a ``--model_config_file`` now (what the config poll does each interval)."""
        self.core.reload_config_file(path)

    def batching_stats(self, name: str) -> dict[str, int]:
        """How many merged session runs answered how many requests (``--enable_batching``)."""
        return self.core.batching_stats(name)


def start_server(
    model_base_path: str | os.PathLike[str] | None = None,
    model_name: str = "default",
    *,
    model_config_file: str | os.PathLike[str] | None = None,
    models: Sequence[ModelConfig] | None = None,
    allow_version_labels_for_unavailable_models: bool = False,
    host: str = "127.0.0.1",
    port: int | None = 0,
    grpc_port: int | None = 0,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    config_poll_interval: float = 0.0,
    enable_batching: bool = False,
    batching_parameters: BatchOptions | str | os.PathLike[str] | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_request_batch_size: int = DEFAULT_MAX_REQUEST_BATCH_SIZE,
    session_options: SessionOptions | None = None,
    rest_threads: int = DEFAULT_THREADS,
    grpc_threads: int = DEFAULT_THREADS,
    shutdown_seconds: float = DEFAULT_SHUTDOWN_SECONDS,
    monitoring_config_file: str | os.PathLike[str] | None = None,
    rest_api_timeout_ms: int = 0,
    enforce_session_run_timeout: bool = True,
    rest_api_enable_cors_support: bool = False,
    max_num_load_retries: int = 5,
    load_retry_interval_micros: int = 60_000_000,
) -> ServingServer:
    """Load the models and start serving; returns the running :class:`ServingServer`.

    Args:
        model_base_path: one model's base path (with ``model_name``, default ``"default"`` as
            in TF Serving). Give exactly one of this, ``model_config_file`` and ``models``.
        model_name: the name of the ``model_base_path`` model.
        model_config_file: a ``ModelServerConfig`` text file.
        models: the models, as :class:`ModelConfig` values.
        allow_version_labels_for_unavailable_models: TF Serving's flag, needed for a config
            file with ``version_labels``.
        host: bind address of both endpoints.
        port: REST port (0: a free one; None: no REST).
        grpc_port: gRPC port (0: a free one; None: no gRPC).
        poll_interval: seconds between scans for new versions (<= 0: load once).
        config_poll_interval: seconds between reloads of ``model_config_file``
            (``--model_config_file_poll_wait_seconds``; <= 0: never). A reload applies TF
            Serving's rules (``ServerCore.reload_config``); a refused one is logged and the
            server keeps its config.
        enable_batching: merge concurrent requests (``--enable_batching``).
        batching_parameters: :class:`BatchOptions` or the path of a ``batching.config``; only
            with ``enable_batching``, as in TF Serving.
        max_request_bytes: larger request bodies/messages are refused.
        max_request_batch_size: larger requests (rows) are refused.
        session_options: thread pools, run timeout, XLA flag.
        rest_threads: REST request threads.
        grpc_threads: gRPC request threads.
        shutdown_seconds: how long :meth:`ServingServer.stop` waits for requests in flight.
        monitoring_config_file: a ``MonitoringConfig`` text file; with ``prometheus_config {
            enable: true }`` the metrics page is served on the REST port at its ``path``
            (``/monitoring/prometheus/metrics`` by default). Read only when REST is served,
            as TF Serving reads it only when it starts its HTTP server (``server.cc``).
        rest_api_timeout_ms: each REST request's session-run timeout
            (``--rest_api_timeout_in_ms``; 0: none). It does not apply to gRPC.
        enforce_session_run_timeout: gRPC session runs end at the client's deadline
            (``--enforce_session_run_timeout``, TF Serving's default true).
        rest_api_enable_cors_support: add CORS headers to every answer of the REST API
            (``--rest_api_enable_cors_support``).
        max_num_load_retries: tries after a failed load before the version is END
            (``--max_num_load_retries``, TF Serving's default 5; 0: one try only).
        load_retry_interval_micros: wait between them (``--load_retry_interval_micros``,
            default 1 minute; negative: none). The version is LOADING meanwhile.

    Returns:
        The started server.

    Example (not run as a doctest: it needs an export on disk):

    ```python
    with start_server("exports/transformer", "transformer") as server:
        ServingClient(server.url, "transformer").predict(["Hallo"])
    ```
    """
    given = [x is not None for x in (model_base_path, model_config_file, models)]
    if sum(given) != 1:
        raise ValueError("Give exactly one of model_base_path, model_config_file or models")
    if model_base_path is not None:
        configs = [single_model_config(model_name, model_base_path)]
    elif model_config_file is not None:
        configs = load_model_server_config(
            model_config_file, allow_version_labels_for_unavailable_models
        )
    else:
        configs = list(models or [])
    if batching_parameters is not None and not enable_batching:
        raise ValueError(
            "batching_parameters_file is set without setting enable_batching to true (TF "
            "Serving refuses this too)"
        )
    batching = None
    if enable_batching:
        if batching_parameters is None:
            batching = BatchOptions()
        elif isinstance(batching_parameters, BatchOptions):
            batching = batching_parameters
        else:
            batching = load_batching_parameters(batching_parameters)
    metrics_path = None
    if monitoring_config_file is not None and port is not None:
        metrics_path = load_monitoring_config(monitoring_config_file)
    core = ServerCore(
        configs,
        session_options,
        batching,
        poll_interval,
        max_request_batch_size,
        allow_version_labels_for_unavailable_models=allow_version_labels_for_unavailable_models,
        config_file=model_config_file,
        config_poll_interval=config_poll_interval,
        load_retries=LoadRetries(max_num_load_retries, load_retry_interval_micros),
    )
    server = ServingServer(
        core,
        host=host,
        rest_port=port,
        grpc_port=grpc_port,
        max_request_bytes=max_request_bytes,
        rest_threads=rest_threads,
        grpc_threads=grpc_threads,
        shutdown_seconds=shutdown_seconds,
        metrics_path=metrics_path,
        rest_api_timeout_ms=rest_api_timeout_ms,
        enforce_session_run_timeout=enforce_session_run_timeout,
        rest_api_enable_cors_support=rest_api_enable_cors_support,
    )
    try:
        return server.start()
    except BaseException:
        server.stop()
        raise
