"""TF Serving's REST API on aiohttp.

Paths, methods, status codes and ``{"error": ...}`` bodies are TF Serving's
(``http_rest_api_handler.cc``): ``POST /v1/models/NAME[/versions/N|/labels/L]:predict``
and ``:classify`` (``classify_codec.py``; ``:regress`` answers UNIMPLEMENTED),
``GET /v1/models/NAME[/versions/N|/labels/L][/metadata]``, matched case-insensitively; a wrong
method on a ``/v1/`` path is 400 "Malformed request", and ``OPTIONS`` a CORS preflight
(``http_server.cc``). Bodies are parsed with rapidjson, as TF Serving parses them. aiohttp
does the HTTP/1.1 (parsing, chunked bodies, keep-alive, the body-size cap); the work of a
request (JSON, session run) runs on a thread pool of ``--rest_api_num_threads`` so the event
loop only moves bytes.
A stop closes the listening socket, answers the requests in flight, then returns.
Requests under ``/v1/`` are counted in the server's metrics (``monitoring``), whose page is
served at the ``--monitoring_config_file``'s path, for any method, as TF Serving does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import rapidjson
from aiohttp import web

from keras_transformer.serving.classify_codec import (
    fill_classification_request,
    make_classify_response,
)
from keras_transformer.serving.codec import (
    decode_predict_request,
    json_str,
    make_predict_response,
    message_to_dict,
)
from keras_transformer.serving.core import ServerCore
from keras_transformer.serving.errors import ServingStatusError, invalid, not_found
from keras_transformer.serving.monitoring import CONTENT_TYPE, REST, elapsed_usec
from keras_transformer.serving.servable import DEFAULT_SIGNATURE

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

_PREDICT_RE = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_STATUS_RE = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:/versions/(\d+)|/labels/([^/:]+))?(?:/(metadata))?",
    re.IGNORECASE,
)
_V1_RE = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)
_RAPIDJSON_ERROR = re.compile(r"Parse error at offset (\d+): (.*)", re.DOTALL)
_NOT_SINGULAR = "The document root must not be followed by other values."
_INT64_MAX = 2**63 - 1
_CORS_ORIGIN = re.compile(r"https?://")
# http_rest_api_util.cc's AddCORSHeaders (with --rest_api_enable_cors_support).
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, GET",
    "Access-Control-Allow-Headers": "Content-Type",
}
_API_OF_VERB = {"classify": "Classify", "regress": "Regress", "predict": "Predict"}


def parse_json_request(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body, parsed as ``json_tensor.cc``'s ``ParseJson`` does
    (rapidjson, so its messages and byte offsets; ``NaN``/``Infinity`` allowed; what follows
    the document is ignored, as with ``kParseStopWhenDoneFlag``), or INVALID_ARGUMENT."""
    if not body:
        raise invalid("JSON Parse error: The document is empty")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        message = f"JSON Parse error: Invalid encoding in string. at offset: {e.start}"
        raise invalid(message) from None
    try:
        request = _loads(body)
    except rapidjson.JSONDecodeError as e:
        match = _RAPIDJSON_ERROR.fullmatch(str(e))
        offset, what = (int(match.group(1)), match.group(2)) if match else (0, str(e))
        if what != _NOT_SINGULAR:
            raise invalid(f"JSON Parse error: {what} at offset: {offset}") from None
        request = _loads(body[:offset])  # the document before what follows it
    except RecursionError:
        raise invalid("JSON Parse error: the document is nested too deeply") from None
    if not isinstance(request, dict):
        raise invalid(f"JSON Value: {json_str(request)} Is not object")
    return request


def _loads(body: bytes) -> Any:
    return rapidjson.loads(body, number_mode=rapidjson.NM_NAN)


def signature_name_of(request: Mapping[str, Any], default: str) -> str:
    """The request's ``signature_name`` (``default`` when absent or empty)."""
    name = request.get("signature_name", default)
    if not isinstance(name, str):
        raise invalid(
            f"JSON Value: {json_str(request)} not formatted correctly. 'signature_name' "
            "key must be a string value."
        )
    return name or default


class _BodilessError(ServingStatusError):
    """An error TF Serving answers with an empty body: ``ParseModelInfo``'s, and a CORS
    preflight's, which return before ``MakeJsonFromStatus`` writes ``{"error": ...}``."""


def _spec(name: str, version: str | None, label: str | None) -> tuple[str, int | None, str | None]:
    if version and int(version) > _INT64_MAX:  # ParseModelInfo's absl::SimpleAtoi into int64
        raise _BodilessError(
            "INVALID_ARGUMENT", f"Failed to convert version: {version} to numeric."
        )
    return (
        urllib.parse.unquote(name),
        int(version) if version else None,
        urllib.parse.unquote(label) if label else None,
    )


def metric_labels(method: str, path: str) -> tuple[str, str, str]:
    """(model name, the stand-in's API name, TF Serving's ``API`` label) of a ``/v1/``
    request: TF Serving labels POSTs with the path's verb and GETs with "" (its
    ``ParseModelInfo`` sets the method only for POST); unparsed requests have no model."""
    if method == "POST":
        m = _PREDICT_RE.fullmatch(path)
        if m:
            verb = m.group(4)
            return urllib.parse.unquote(m.group(1)), _API_OF_VERB[verb.lower()], verb
    elif method in ("GET", "HEAD"):
        m = _STATUS_RE.fullmatch(path)
        if m and m.group(1):
            api = "GetModelMetadata" if m.group(4) else "GetModelStatus"
            return urllib.parse.unquote(m.group(1)), api, ""
    return "", "", ""


def _too_large(limit: int, size: int | None = None) -> ServingStatusError:
    what = f"Request body of {size} bytes" if size is not None else "Request body"
    return ServingStatusError(
        "RESOURCE_EXHAUSTED", f"{what} exceeds the limit of {limit} bytes", http_status=413
    )


class RestApp:
    """The request handlers: JSON in, JSON out, over a :class:`ServerCore`; ``timeout_ms`` is
    every session run's timeout (``--rest_api_timeout_in_ms``; 0: none)."""

    def __init__(self, core: ServerCore, max_request_bytes: int, timeout_ms: int = 0) -> None:
        self.core = core
        self.max_request_bytes = int(max_request_bytes)
        self.timeout_ms = int(timeout_ms)

    def predict(self, name: str, version: int | None, label: str | None, body: bytes) -> dict:
        request = parse_json_request(body)
        signature_name = signature_name_of(request, DEFAULT_SIGNATURE)
        servable = self.core.servable(name, version, label)
        try:
            signature = servable.rest_signature(signature_name)
            arrays, row_format = decode_predict_request(
                request, dict(signature.inputs), signature_name
            )
            outputs = self.core.predict(
                servable, signature_name, arrays, timeout_ms=self.timeout_ms
            )
        finally:
            servable.release()
        return make_predict_response(outputs, row_format)

    def classify(self, name: str, version: int | None, label: str | None, body: bytes) -> dict:
        from tensorflow_serving.apis import classification_pb2

        request_json = parse_json_request(body)
        request = classification_pb2.ClassificationRequest()
        request.model_spec.name = name
        fill_classification_request(request_json, signature_name_of(request_json, ""), request)
        servable = self.core.servable(name, version, label)
        try:
            response = self.core.classify(servable, request, self.timeout_ms)
        finally:
            servable.release()
        return make_classify_response(response.result)

    def status(self, name: str, version: int | None, label: str | None) -> dict:
        return message_to_dict(self.core.status(name, version, label))

    def metadata(self, name: str, version: int | None, label: str | None) -> dict:
        servable = self.core.servable(name, version, label)
        try:
            response = self.core.metadata(servable)
        finally:
            servable.release()
        from tensorflow_serving.apis import get_model_metadata_pb2

        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return {
            "model_spec": message_to_dict(response.model_spec),
            "metadata": {"signature_def": message_to_dict(signature_map)},
        }

    def dispatch(self, method: str, path: str, body: bytes) -> dict[str, Any]:
        """The JSON answer of one request (raises :class:`ServingStatusError`)."""
        if method == "POST":
            m = _PREDICT_RE.fullmatch(path)
            if m:
                name, version, label, verb = m.groups()
                if verb.lower() == "classify":
                    return self.classify(*_spec(name, version, label), body)
                if verb.lower() != "predict":
                    raise ServingStatusError(
                        "UNIMPLEMENTED",
                        f"{verb} is not implemented by the development stand-in server",
                    )
                return self.predict(*_spec(name, version, label), body)
        elif method == "GET":  # HEAD, PUT, ...: "Malformed request", as TF Serving answers
            m = _STATUS_RE.fullmatch(path)
            if m:
                name, version, label, metadata = m.groups()
                if not name:
                    raise invalid("Missing model name in request.")
                spec = _spec(name, version, label)
                return self.metadata(*spec) if metadata else self.status(*spec)
        if _V1_RE.fullmatch(path):
            raise invalid(f"Malformed request: {method} {path}")
        raise not_found(f"Not found: {method} {path} (the REST API lives under /v1/)")

    def answer(self, method: str, path: str, body: bytes, origin: str = "") -> tuple[int, bytes]:
        """(HTTP status, JSON body) for a request (``origin``: its ``Origin`` header, which a
        CORS preflight needs); never raises."""
        start, code = time.monotonic_ns(), "OK"
        try:
            if method == "OPTIONS" and _V1_RE.fullmatch(path):
                # http_server.cc's RestApiRequestDispatcher: a preflight, with no body.
                if not _CORS_ORIGIN.search(origin):
                    raise _BodilessError(
                        "FAILED_PRECONDITION", "Origin header is missing in CORS preflight"
                    )
                status, payload = 200, None
            else:
                status, payload = 200, self.dispatch(method, path, body)
        except _BodilessError as e:
            status, payload, code = e.http_status, None, e.code
        except ServingStatusError as e:
            status, payload, code = e.http_status, {"error": e.message}, e.code
        except Exception as e:  # never let a request kill the worker or leak a traceback
            logger.exception("internal error on %s %s", method, path)
            status, payload = 500, {"error": f"Internal error: {type(e).__name__}: {e}"}
            code = "INTERNAL"
        if _V1_RE.fullmatch(path):  # what TF Serving's REST dispatcher handles and counts
            name, api, tf_api = metric_labels(method, path)
            self.core.metrics.record_request(name, api, REST, code, elapsed_usec(start), tf_api)
        if status != 200:
            logger.info("%s %s -> %d %s", method, path, status, (payload or {}).get("error"))
        if payload is None:
            return status, b""
        text = json.dumps(payload, ensure_ascii=False)
        return status, text.encode("utf-8", "surrogatepass")


class RestServer:
    """The aiohttp server of a :class:`RestApp`, on its own event loop thread.

    Args:
        core: the models.
        host: bind address.
        port: TCP port (0: a free one, see :attr:`port`).
        max_request_bytes: larger bodies are answered 413.
        num_threads: request threads (``--rest_api_num_threads``).
        shutdown_timeout: seconds :meth:`stop` waits for requests in flight.
        metrics_path: where the Prometheus page is served (None: nowhere).
        timeout_ms: each request's session-run timeout (``--rest_api_timeout_in_ms``; 0:
            none).
        cors: add CORS headers to the answers under ``/v1/``
            (``--rest_api_enable_cors_support``).
    """

    def __init__(
        self,
        core: ServerCore,
        host: str,
        port: int,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        num_threads: int = 8,
        shutdown_timeout: float = 60.0,
        metrics_path: str | None = None,
        timeout_ms: int = 0,
        cors: bool = False,
    ) -> None:
        self.app = RestApp(core, max_request_bytes, timeout_ms)
        self.cors = cors
        self.metrics_path = metrics_path
        self.host = host
        self._requested_port = port
        self._shutdown_timeout = shutdown_timeout
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, num_threads), thread_name_prefix="rest"
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rest-api", daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _handle(self, request: web.Request) -> web.Response:
        method, path = request.method, request.rel_url.raw_path
        if path == self.metrics_path:  # http_server.cc: an exact-path handler, any method
            page = self.app.core.metrics.page()
            return web.Response(status=200, body=page, headers={"Content-Type": CONTENT_TYPE})
        limit = self.app.max_request_bytes
        try:
            if request.content_length is not None and request.content_length > limit:
                raise _too_large(limit, request.content_length)
            body = await request.read() if method == "POST" else b""
        except ServingStatusError as e:
            return self._response(e.http_status, {"error": e.message})
        except web.HTTPRequestEntityTooLarge:
            return self._response(413, {"error": _too_large(limit).message})
        loop = asyncio.get_running_loop()
        origin = request.headers.get("Origin", "")
        status, data = await loop.run_in_executor(
            self._executor, self.app.answer, method, path, body, origin
        )
        headers = CORS_HEADERS if self.cors and _V1_RE.fullmatch(path) else None
        return web.Response(
            status=status, body=data, content_type="application/json", headers=headers
        )

    @staticmethod
    def _response(status: int, payload: dict) -> web.Response:
        logger.info("-> %d %s", status, payload.get("error"))
        body = json.dumps(payload)
        return web.Response(status=status, text=body, content_type="application/json")

    async def _start(self) -> None:
        app = web.Application(client_max_size=self.app.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=self._shutdown_timeout
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._requested_port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def start(self) -> None:
        """Bind and serve (returns once the socket listens)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=60)

    def stop(self) -> None:
        """Stop listening, answer the requests in flight, then end the loop thread."""
        if self._runner is not None:
            cleanup = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            try:
                cleanup.result(timeout=self._shutdown_timeout + 10)
            except Exception:
                logger.exception("REST server did not stop cleanly")
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._executor.shutdown(wait=True)
