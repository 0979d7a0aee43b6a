"""A small client for TF Serving (and the development stand-in), over REST or gRPC.

    client = ServingClient("http://localhost:8501", "transformer", label="stable")
    client.predict(["Ein Hund rennt."])          # row format -> the "predictions" list
    client.predict(["..."], columnar=True)       # columnar   -> the "outputs" value
    client.classify([{"sentence": "A fine film."}], signature_name="classification")
                                                 # :classify  -> the "results" list
    client.status(); client.metadata()
    ServingClient("grpc://localhost:8500", "transformer")   # the same calls over gRPC

REST needs only the standard library: connection errors, timeouts and 503 answers are retried
with exponential backoff. gRPC (``grpc://``) uses ``tensorflow-serving-api``'s stubs and gRPC's
own retry policy for UNAVAILABLE (`grpc_client.py`); answers have the same shapes as REST's.
Every other failure raises :class:`ServingError` with the HTTP status (for gRPC, the one
TF Serving maps its code to), the canonical ``code`` where known, and the server's message.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({503})


class ServingError(Exception):
    """A failed request.

    ``status_code`` is the HTTP status (None when no answer came); over gRPC, the HTTP status
    TF Serving maps the gRPC code to. ``code`` is the gRPC status code name (gRPC only).
    """

    def __init__(
        self, message: str, status_code: int | None = None, url: str = "", code: str | None = None
    ) -> None:
        prefix = code if code else (f"HTTP {status_code}" if status_code is not None else "")
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.message = message
        self.status_code = status_code
        self.url = url
        self.code = code


def _encode(value: Any) -> Any:
    """bytes -> ``{"b64": ...}`` anywhere in a nested request value."""
    if isinstance(value, (bytes, bytearray)):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


class ServingClient:
    """Client for one model on a TF Serving endpoint, REST or gRPC.

    Args:
        url: the REST root, e.g. ``http://localhost:8501``, or ``grpc://HOST:PORT`` for gRPC.
        model_name: the model's name on the server.
        version: pin a version (``/versions/N``); exclusive with ``label``.
        label: a version label (``/labels/L``) from the server's model config.
        timeout: seconds per HTTP attempt.
        retries: extra attempts after a connection error, timeout or 503.
        backoff: the first retry delay in seconds; it doubles each retry (capped at 5 s).
    """

    def __init__(
        self,
        url: str,
        model_name: str,
        version: int | None = None,
        label: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.1,
    ) -> None:
        if version is not None and label is not None:
            raise ValueError("Give a version or a label, not both")
        if retries < 0 or timeout <= 0:
            raise ValueError("retries must be >= 0 and timeout > 0")
        self.url = url.rstrip("/")
        self.model_name = model_name
        self.version = version
        self.label = label
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._grpc = None
        split = urllib.parse.urlsplit(self.url)
        if split.scheme == "grpc":
            from keras_transformer.serving.grpc_client import GrpcTransport

            self._grpc = GrpcTransport(
                split.netloc, model_name, version, label, timeout, retries, backoff
            )
        elif split.scheme not in ("http", "https"):
            raise ValueError(f"Expected an http://, https:// or grpc:// URL, got {url!r}")

    @property
    def model_url(self) -> str:
        url = f"{self.url}/v1/models/{urllib.parse.quote(self.model_name, safe='')}"
        if self.version is not None:
            url += f"/versions/{int(self.version)}"
        elif self.label is not None:
            url += f"/labels/{urllib.parse.quote(self.label, safe='')}"
        return url

    def predict(
        self,
        instances: Sequence[Any] | Mapping[str, Any],
        signature_name: str | None = None,
        columnar: bool = False,
    ) -> Any:
        """Run ``:predict``; returns ``predictions`` (row format) or ``outputs`` (columnar).

        ``instances`` is a list of sentences (single-input signatures), a list of objects
        (several inputs) or, with ``columnar=True``, a list/value or an object of named inputs.
        ``bytes`` values are sent as ``{"b64": ...}``.
        """
        if isinstance(instances, (str, bytes)) or (not columnar and isinstance(instances, Mapping)):
            raise TypeError("Row-format predict needs a list of instances")
        if self._grpc is not None:
            return self._via_grpc(self._grpc.predict, instances, signature_name, columnar)
        body: dict[str, Any] = {}
        if signature_name is not None:
            body["signature_name"] = signature_name
        if columnar:
            body["inputs"] = _encode(instances)
        else:
            body["instances"] = _encode(list(instances))
        response = self._request("POST", f"{self.model_url}:predict", body)
        key = "outputs" if columnar else "predictions"
        if key not in response:
            raise ServingError(f"Response has no {key!r}: {str(response)[:200]}", 200)
        return response[key]

    def classify(
        self,
        examples: Sequence[Mapping[str, Any]],
        signature_name: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> list[list[list[Any]]]:
        """Run ``:classify`` (gRPC ``Classify``); returns ``results``: each example's
        ``[label, score]`` pairs.

        Args:
            examples: one object of ``tf.Example`` features per example, each a value or a
                list: strings, ``bytes`` (sent as ``{"b64": ...}``), integers, floats.
            signature_name: a classify signature (the server's default: ``serving_default``).
            context: features every example gets too (an example's own win).

        Returns:
            ``[[[label, score], ...], ...]``, an example a row.

        Example (not run as a doctest: it needs a server with a classifier export):

        ```python
        ServingClient("http://localhost:8501", "classifier").classify(
            [{"sentence": "A fine film."}], signature_name="classification"
        )  # [[["negative", 0.04], ["positive", 0.96]]]
        ```
        """
        if isinstance(examples, (str, bytes, Mapping)):
            raise TypeError("classify needs a list of examples (objects of features)")
        body: dict[str, Any] = {}
        if signature_name is not None:
            body["signature_name"] = signature_name
        if context is not None:
            body["context"] = _encode(context)
        body["examples"] = _encode(list(examples))
        if self._grpc is not None:
            return self._via_grpc(self._grpc.classify, body)
        response = self._request("POST", f"{self.model_url}:classify", body)
        if "results" not in response:
            raise ServingError(f"Response has no 'results': {str(response)[:200]}", 200)
        return response["results"]

    def status(self) -> dict[str, Any]:
        """``GET /v1/models/NAME[...]``: ``{"model_version_status": [...]}``."""
        if self._grpc is not None:
            return self._via_grpc(self._grpc.status)
        return self._request("GET", self.model_url)

    def metadata(self) -> dict[str, Any]:
        """``GET /v1/models/NAME[...]/metadata``: model spec and signature defs."""
        if self._grpc is not None:
            return self._via_grpc(self._grpc.metadata)
        return self._request("GET", f"{self.model_url}/metadata")

    def _via_grpc(self, method: Any, *args: Any) -> Any:
        from keras_transformer.serving.errors import ServingStatusError

        try:
            return method(*args)
        except ServingStatusError as e:
            status = None if e.code == "UNAVAILABLE" and "connect" in e.message else e.http_status
            raise ServingError(e.message, status, self.url, e.code) from None

    def close(self) -> None:
        """Close the gRPC channel (REST holds no connection)."""
        if self._grpc is not None:
            self._grpc.close()

    def _request(self, method: str, url: str, body: Any = None) -> dict[str, Any]:
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:  # noqa: S310
                    return self._decode(reply.read(), reply.status, url)
            except urllib.error.HTTPError as e:
                payload = e.read()
                e.close()
                message = self._error_message(payload, e.reason)
                if e.code in RETRY_STATUSES and not last:
                    logger.info("%s %s: HTTP %d, retrying in %.2fs", method, url, e.code, delay)
                else:
                    raise ServingError(message, e.code, url) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                reason = getattr(e, "reason", e)
                if last:
                    raise ServingError(
                        f"{method} {url} failed after {attempt + 1} attempt(s): {reason}", None, url
                    ) from e
                logger.info("%s %s: %s, retrying in %.2fs", method, url, reason, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _error_message(payload: bytes, reason: Any) -> str:
        try:
            decoded = json.loads(payload.decode("utf-8"))
            if isinstance(decoded, dict) and "error" in decoded:
                return str(decoded["error"])
        except (UnicodeDecodeError, ValueError):
            pass
        text = payload.decode("utf-8", "replace").strip()
        return text[:500] or str(reason)

    @staticmethod
    def _decode(payload: bytes, status: int, url: str) -> dict[str, Any]:
        try:
            return json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ServingError(f"Response is not JSON: {e}", status, url) from None
