"""The stand-in's command line: ``tensorflow_model_server``'s flags, where they exist.

``keras-transformer serve ...`` and ``python -m keras_transformer.serving ...`` both land here.
The server runs until SIGINT or SIGTERM; then it stops listening, answers the requests in
flight, unloads the models and exits 0. A configuration TF Serving would refuse exits 1 with
"Failed to start server. Error: ..." naming the file, line and field.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from keras_transformer.constants import DEFAULT_LOG_LEVEL, LOG_LEVELS
from keras_transformer.serving.batching_config import load_batching_parameters
from keras_transformer.serving.config import ConfigError
from keras_transformer.serving.core import DEFAULT_MAX_REQUEST_BATCH_SIZE
from keras_transformer.serving.rest import DEFAULT_MAX_REQUEST_BYTES
from keras_transformer.serving.servable import SessionOptions
from keras_transformer.serving.server import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_SHUTDOWN_SECONDS,
    DEFAULT_THREADS,
    start_server,
)

logger = logging.getLogger(__name__)


def parse_bool(value: str) -> bool:
    """A boolean flag value as TF Serving's flag parser takes it (`true`/`false`, `1`/`0`)."""
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, received {value!r}")


def _bool_flag(
    p: argparse.ArgumentParser,
    name: str,
    help: str,  # noqa: A002
    default: bool = False,
) -> None:
    p.add_argument(name, type=parse_bool, nargs="?", const=True, default=default, help=help)


def build_arg_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The server's flags, added to ``p`` (a new parser by default).

    Example:
        >>> build_arg_parser().parse_args(["--port", "0"]).port
        0
    """
    if p is None:
        p = argparse.ArgumentParser(
            prog="python -m keras_transformer.serving",
            description=(
                "Development stand-in for TF Serving's REST and gRPC APIs (not TF Serving). "
                "Flags follow tensorflow_model_server where they exist."
            ),
        )
    p.add_argument("--model_name", default="default", help="name of the model (with base path)")
    p.add_argument("--model_base_path", default=None, help="directory holding version dirs")
    p.add_argument("--model_config_file", default=None, help="ModelServerConfig text proto")
    p.add_argument(
        "--model_config_file_poll_wait_seconds",
        type=int,
        default=0,
        help="reload --model_config_file every N seconds (0: never, as TF Serving's default)",
    )
    _bool_flag(
        p,
        "--allow_version_labels_for_unavailable_models",
        "let a new version label point at a version not yet loaded (TF Serving's flag; a "
        "config with labels needs it at startup; moving a label needs the version loaded)",
    )
    p.add_argument("--port", type=int, default=8500, help="gRPC port (0 picks a free port)")
    p.add_argument("--rest_api_port", type=int, default=8501, help="0 picks a free port")
    p.add_argument(
        "--host",
        "--rest_api_host",
        dest="host",
        default="127.0.0.1",
        help="bind address of both APIs (stand-in only; TF Serving binds all interfaces)",
    )
    p.add_argument(
        "--rest_api_timeout_in_ms",
        type=int,
        default=30000,
        help="session run timeout of each REST request (0: none); gRPC uses the client's deadline",
    )
    _bool_flag(
        p,
        "--rest_api_enable_cors_support",
        "add CORS headers to the REST API's answers (TF Serving's flag)",
    )
    _bool_flag(
        p,
        "--enforce_session_run_timeout",
        "end a gRPC request's session run at the client's deadline (TF Serving's flag)",
        default=True,
    )
    p.add_argument("--rest_api_num_threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--grpc_max_threads", type=int, default=DEFAULT_THREADS)
    p.add_argument(
        "--file_system_poll_wait_seconds",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        help="interval of the version poll (<=0: load once, never poll)",
    )
    p.add_argument(
        "--max_num_load_retries",
        type=int,
        default=5,
        help="tries after a failed load before giving up (TF Serving's flag; 0: one try)",
    )
    p.add_argument(
        "--load_retry_interval_micros",
        type=int,
        default=60_000_000,
        help="wait between load tries, in microseconds (TF Serving's flag; default 1 minute)",
    )
    _bool_flag(p, "--enable_batching", "merge concurrent requests into one session run")
    p.add_argument("--batching_parameters_file", default=None, help="BatchingParameters text proto")
    p.add_argument(
        "--monitoring_config_file",
        default=None,
        help="MonitoringConfig text proto: with prometheus_config { enable: true }, metrics on "
        "the REST port at its path",
    )
    p.add_argument(
        "--batching_max_padding",
        type=float,
        default=None,
        help="stand-in only: split merged batches that would pad more than this fraction",
    )
    p.add_argument("--max_request_bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    p.add_argument(
        "--max_request_batch_size",
        type=int,
        default=DEFAULT_MAX_REQUEST_BATCH_SIZE,
        help="most instances / first-dim rows one request may carry",
    )
    p.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0)
    p.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0)
    _bool_flag(
        p,
        "--enable_signature_method_name_check",
        "a signature must have its API's method_name (TF Serving's flag; default false)",
    )
    _bool_flag(
        p,
        "--xla_cpu_compilation_enabled",
        "allow graphs that need XLA compilation (TF Serving's flag; default false)",
    )
    p.add_argument(
        "--shutdown_timeout_seconds",
        type=float,
        default=DEFAULT_SHUTDOWN_SECONDS,
        help="how long a stop waits for requests in flight",
    )
    p.add_argument(
        "--log_level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        default=DEFAULT_LOG_LEVEL,
        help=f"{', '.join(LOG_LEVELS)}, in any case",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and serve until SIGINT/SIGTERM."""
    return run_from_args(build_arg_parser().parse_args(argv))


def run_from_args(args: argparse.Namespace) -> int:
    """Start the server from parsed :func:`build_arg_parser` flags; serve until a signal."""
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.model_base_path is None and args.model_config_file is None:
        sys.stderr.write(
            "Both --model_base_path and --model_config_file are empty: give one of them\n"
        )
        return 2
    if args.model_config_file is not None:
        # TF Serving serves the config file and ignores --model_name/--model_base_path
        # (server.cc BuildAndStart), which its Docker image always passes.
        args.model_base_path = None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        batching = args.batching_parameters_file
        if batching is not None and args.enable_batching:
            batching = load_batching_parameters(batching, args.batching_max_padding)
        server = start_server(
            args.model_base_path,
            args.model_name,
            model_config_file=args.model_config_file,
            allow_version_labels_for_unavailable_models=(
                args.allow_version_labels_for_unavailable_models
            ),
            host=args.host,
            port=args.rest_api_port,
            grpc_port=args.port,
            poll_interval=args.file_system_poll_wait_seconds,
            config_poll_interval=args.model_config_file_poll_wait_seconds,
            max_num_load_retries=args.max_num_load_retries,
            load_retry_interval_micros=args.load_retry_interval_micros,
            enable_batching=args.enable_batching,
            batching_parameters=batching,
            max_request_bytes=args.max_request_bytes,
            max_request_batch_size=args.max_request_batch_size,
            session_options=SessionOptions(
                intra_op_threads=args.tensorflow_intra_op_parallelism,
                inter_op_threads=args.tensorflow_inter_op_parallelism,
                xla_compilation_enabled=args.xla_cpu_compilation_enabled,
                signature_method_name_check=args.enable_signature_method_name_check,
            ),
            rest_threads=args.rest_api_num_threads,
            grpc_threads=args.grpc_max_threads,
            shutdown_seconds=args.shutdown_timeout_seconds,
            monitoring_config_file=args.monitoring_config_file,
            rest_api_timeout_ms=args.rest_api_timeout_in_ms,
            rest_api_enable_cors_support=args.rest_api_enable_cors_support,
            enforce_session_run_timeout=args.enforce_session_run_timeout,
        )
    except (ConfigError, ValueError, OSError) as e:
        sys.stderr.write(f"Failed to start server. Error: {e}\n")
        return 1
    logger.warning(
        "This is a development stand-in with TF Serving's REST and gRPC APIs, not TF Serving. "
        "REST at %s, gRPC at %s",
        server.url,
        server.grpc_target,
    )
    try:
        stop.wait()
        logger.info("Stopping: answering the requests in flight, then unloading")
    finally:
        server.stop()
    return 0
