"""Errors as TF Serving reports them: a canonical status code and a message.

The stand-in raises :class:`ServingStatusError` wherever TF Serving returns a non-OK
``tensorflow::Status``. Each front end turns it into its own form: the REST app answers
``{"error": message}`` with the HTTP status of TF Serving's ``ToHTTPStatusCode``
(``tensorflow_serving/model_servers/http_server.cc``), the gRPC service aborts the call with
the same code (``ToGRPCStatus``, ``grpc_status_util.cc``, which also cuts messages at 1024
characters).
"""

from __future__ import annotations

import grpc

# TF Serving's ToHTTPStatusCode, keyed by canonical code name.
HTTP_STATUS_FOR_CODE = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}
# The canonical codes by number (tensorflow.error.Code uses the same numbers as gRPC).
CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
# ToGRPCStatus: longer messages are cut here and marked.
GRPC_MESSAGE_LIMIT = 1024


class ServingStatusError(Exception):
    """A request that failed with canonical status ``code`` (e.g. ``"INVALID_ARGUMENT"``).

    Args:
        code: the canonical code name, a key of ``HTTP_STATUS_FOR_CODE``.
        message: what was wrong and what was expected, as the client sees it.
        http_status: the HTTP status when it is not the one TF Serving maps ``code`` to
            (REST-only answers such as 413 for an oversized body).

    Example:
        >>> ServingStatusError("NOT_FOUND", "Servable not found").http_status
        404
    """

    def __init__(self, code: str, message: str, http_status: int | None = None) -> None:
        if code not in HTTP_STATUS_FOR_CODE:
            raise ValueError(f"Unknown status code {code!r}; expected one of the canonical codes")
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status or HTTP_STATUS_FOR_CODE[code]

    @property
    def grpc_message(self) -> str:
        """The message as TF Serving's gRPC server sends it (cut at 1024 characters)."""
        if len(self.message) > GRPC_MESSAGE_LIMIT:
            return self.message[:GRPC_MESSAGE_LIMIT] + "...TRUNCATED"
        return self.message


def invalid(message: str) -> ServingStatusError:
    """An ``INVALID_ARGUMENT`` error (HTTP 400)."""
    return ServingStatusError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingStatusError:
    """A ``NOT_FOUND`` error (HTTP 404)."""
    return ServingStatusError("NOT_FOUND", message)


def code_name_of(error: BaseException) -> str:
    """The canonical code of a TensorFlow ``OpError`` (``UNKNOWN`` for anything else)."""
    return CODE_NAMES.get(getattr(error, "error_code", None), "UNKNOWN")
