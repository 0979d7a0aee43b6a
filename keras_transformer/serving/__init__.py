"""TF Serving support: a REST/gRPC client, the op allow-list check, and a development
stand-in server.

``serving.client`` needs only the standard library for REST (gRPC loads
``tensorflow-serving-api``). ``serving.server`` (the stand-in with TF Serving's REST and gRPC
APIs; *not* TF Serving, see its docstring for the modules it is made of) needs the ``serve``
extra; it and ``serving.ops`` import TensorFlow, so they are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from keras_transformer.serving.client import ServingClient, ServingError

__all__ = [
    "ServingClient",
    "ServingError",
    "ServingServer",
    "check_serving_ops",
    "graph_ops",
    "start_server",
]

_LAZY = {
    "ServingServer": "keras_transformer.serving.server",
    "start_server": "keras_transformer.serving.server",
    "check_serving_ops": "keras_transformer.serving.ops",
    "graph_ops": "keras_transformer.serving.ops",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
