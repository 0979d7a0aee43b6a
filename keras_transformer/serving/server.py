"""A development stand-in for TF Serving's REST API. It is *not* TF Serving.

It serves SavedModels the way ``tensorflow_model_server`` does, behind the same REST contract
(https://www.tensorflow.org/tfx/serving/api_rest), so the export, the client and the
deployment can be developed and tested where the real server cannot be installed:

* loading through the TF1 session loader (``tf.compat.v1.saved_model.loader.load`` with the
  ``serve`` tag into its own ``Graph`` + ``Session``) and running SignatureDefs by the tensor
  names in the MetaGraphDef, as TF Serving's C++ server does; ``tensorflow_text`` is imported
  first (when installed) so tf-text's ops are registered;
* version directories ``BASE/<integer>`` polled from the base path (the latest serves by
  default; a directory without ``saved_model.pb`` is ignored), optional ``--model_config_file``
  (``model_config_list`` with version policies and ``version_labels``);
* ``POST /v1/models/NAME[/versions/N|/labels/L]:predict`` in row (``instances``) and columnar
  (``inputs``) formats, ``{"b64": ...}`` binary strings, ``*_bytes`` outputs as base64,
  ``GET /v1/models/NAME[/versions/N|/labels/L]`` (status) and ``.../metadata``;
* errors as ``{"error": "..."}`` with TF Serving's status-code mapping, and TF Serving's
  messages where known;
* optional dynamic batching of concurrent requests (``--enable_batching``,
  ``--batching_parameters_file`` in TF Serving's ``batching.config`` text format);
* TF Serving's XLA rule: ``tensorflow_model_server`` disables XLA compilation unless started
  with ``--xla_cpu_compilation_enabled=true``, so a graph that needs it (an ``Xla*`` op or a
  function marked ``_XlaMustCompile``) fails there with "INTERNAL: XLA compilation disabled".
  TF Serving reports such a version AVAILABLE and fails its first request; the stand-in
  refuses to load it (state ``END``, error ``INTERNAL``, the same message naming what needs
  XLA), so the mistake shows at load time. The same flag lifts the rule here.

What it does not do: gRPC, classify/regress, Prometheus metrics, model-config reload over RPC,
resource accounting. Differences from TF Serving that matter to a client: a string output that
is not valid UTF-8 (and whose name does not end in ``_bytes``) is answered with 400 here, where
TF Serving writes the raw bytes into the JSON; request bodies and per-request batch sizes are
capped (``--max_request_bytes``, ``--max_request_batch_size``).

Run ``python -m keras_transformer.serving.server --model_base_path BASE/NAME --model_name NAME``
or, from Python, ``with start_server("BASE/NAME", "NAME", port=0) as server: server.url``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import dataclasses
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from keras_transformer.compat import silence_tf_deprecation
from keras_transformer.serving.ops import XLA_FLAG, xla_requirements

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
SERVE_TAG = "serve"
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_REQUEST_BATCH_SIZE = 512
DEFAULT_POLL_SECONDS = 1.0
_MAX_JSON_RANK = 32
_B64_KEY = "b64"
_BYTES_SUFFIX = "_bytes"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class ServingStatusError(Exception):
    """An error answered as ``{"error": message}`` with HTTP status ``http_status``."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message


def _invalid(message: str) -> ServingStatusError:
    return ServingStatusError(400, message)


def _not_found(message: str) -> ServingStatusError:
    return ServingStatusError(404, message)


# TF Serving's ToHTTPStatusCode (model_servers/http_server.cc), keyed by TF error code number.
_HTTP_FOR_TF_CODE = {
    1: 499,  # CANCELLED
    2: 500,  # UNKNOWN
    3: 400,  # INVALID_ARGUMENT
    4: 504,  # DEADLINE_EXCEEDED
    5: 404,  # NOT_FOUND
    6: 409,  # ALREADY_EXISTS
    7: 403,  # PERMISSION_DENIED
    8: 429,  # RESOURCE_EXHAUSTED
    9: 400,  # FAILED_PRECONDITION
    10: 409,  # ABORTED
    11: 400,  # OUT_OF_RANGE
    12: 501,  # UNIMPLEMENTED
    13: 500,  # INTERNAL
    14: 503,  # UNAVAILABLE
    15: 500,  # DATA_LOSS
    16: 401,  # UNAUTHENTICATED
}


# --------------------------------------------------------------------------------------------
# Protobuf text format (the subset used by models.config and batching.config)
# --------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""\s+|\#[^\n]*|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_][\w.]*|[-+]?[\d.][\w.+-]*|[{}<>\[\]:,;]""",
)


def _tokenize_text_proto(text: str) -> list[str]:
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise ValueError(f"Cannot parse text proto at offset {pos}: {text[pos : pos + 20]!r}")
        tok = m.group(0)
        pos = m.end()
        if tok.strip() and not tok.startswith("#"):
            tokens.append(tok)
    return tokens


def _scalar(tok: str) -> Any:
    if tok[0] in "\"'":
        return tok[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    if tok in ("true", "True"):
        return True
    if tok in ("false", "False"):
        return False
    try:
        return int(tok, 0)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return tok  # an enum name


def parse_text_proto(text: str) -> dict[str, list[Any]]:
    """Parse protobuf text format into ``{field: [values...]}`` (messages become dicts).

    Enough for ``ModelServerConfig`` and ``BatchingParameters`` files; every field maps to a
    list because any field may repeat.
    """
    tokens = _tokenize_text_proto(text)
    pos = 0

    def message(end: str | None) -> dict[str, list[Any]]:
        nonlocal pos
        fields: dict[str, list[Any]] = collections.defaultdict(list)
        while pos < len(tokens):
            tok = tokens[pos]
            if end is not None and tok == end:
                pos += 1
                return dict(fields)
            if tok in ",;":
                pos += 1
                continue
            name = tok
            pos += 1
            if pos < len(tokens) and tokens[pos] == ":":
                pos += 1
            if pos >= len(tokens):
                raise ValueError(f"Text proto ends after field name {name!r}")
            tok = tokens[pos]
            if tok in ("{", "<"):
                pos += 1
                fields[name].append(message("}" if tok == "{" else ">"))
            elif tok == "[":
                pos += 1
                while tokens[pos] != "]":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    if tokens[pos] in ("{", "<"):
                        close = "}" if tokens[pos] == "{" else ">"
                        pos += 1
                        fields[name].append(message(close))
                    else:
                        fields[name].append(_scalar(tokens[pos]))
                        pos += 1
                pos += 1
            else:
                value = _scalar(tok)
                pos += 1
                # Adjacent string literals concatenate.
                while (
                    isinstance(value, str)
                    and tok[0] in "\"'"
                    and pos < len(tokens)
                    and tokens[pos][0] in "\"'"
                ):
                    value += _scalar(tokens[pos])
                    pos += 1
                fields[name].append(value)
        if end is not None:
            raise ValueError(f"Text proto: missing {end!r}")
        return dict(fields)

    return message(None)


def _one(fields: Mapping[str, list[Any]], name: str, default: Any = None) -> Any:
    values = fields.get(name)
    return values[-1] if values else default


def _wrapped(fields: Mapping[str, list[Any]], name: str, default: Any) -> Any:
    """A ``google.protobuf.*Value`` wrapper field: ``name { value: X }`` (or a bare ``name: X``)."""
    value = _one(fields, name)
    if value is None:
        return default
    if isinstance(value, dict):
        return _one(value, "value", default)
    return value


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ModelConfig:
    """One entry of ``model_config_list``.

    ``version_policy`` is ``("latest", n)``, ``("all", None)`` or ``("specific", {versions})``.
    """

    name: str
    base_path: str
    version_policy: tuple[str, Any] = ("latest", 1)
    version_labels: dict[str, int] = dataclasses.field(default_factory=dict)


def parse_model_config(text: str, config_dir: str = ".") -> list[ModelConfig]:
    """Parse a TF Serving ``--model_config_file`` (``model_config_list { config { ... } }``).

    A relative ``base_path`` is taken relative to ``config_dir``.
    """
    root = parse_text_proto(text)
    config_list = _one(root, "model_config_list")
    if config_list is None:
        raise ValueError("The model config has no model_config_list")
    configs = []
    for entry in config_list.get("config", []):
        name = _one(entry, "name")
        base_path = _one(entry, "base_path")
        if not name or not base_path:
            raise ValueError("Each model config needs a name and a base_path")
        platform = _one(entry, "model_platform", "tensorflow")
        if platform != "tensorflow":
            raise ValueError(f"Model {name!r}: only model_platform 'tensorflow' is supported")
        policy: tuple[str, Any] = ("latest", 1)
        policy_fields = _one(entry, "model_version_policy")
        if policy_fields:
            if "all" in policy_fields:
                policy = ("all", None)
            elif "specific" in policy_fields:
                versions = {int(v) for v in _one(policy_fields, "specific").get("versions", [])}
                policy = ("specific", versions)
            elif "latest" in policy_fields:
                policy = ("latest", int(_one(_one(policy_fields, "latest"), "num_versions", 1)))
        labels = {}
        for label in entry.get("version_labels", []):
            labels[str(_one(label, "key"))] = int(_one(label, "value"))
        if not os.path.isabs(base_path):
            base_path = os.path.normpath(os.path.join(config_dir, base_path))
        configs.append(ModelConfig(name, base_path, policy, labels))
    if not configs:
        raise ValueError("The model config lists no models")
    return configs


def load_model_config_file(path: str | os.PathLike[str]) -> list[ModelConfig]:
    with open(path, encoding="utf-8") as f:
        return parse_model_config(f.read(), os.path.dirname(os.path.abspath(path)))


@dataclasses.dataclass
class BatchingParameters:
    """The fields of TF Serving's ``BatchingParameters`` that the stand-in uses."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    num_batch_threads: int = 2
    max_enqueued_batches: int = 100

    @classmethod
    def from_text(cls, text: str) -> BatchingParameters:
        fields = parse_text_proto(text)
        params = cls(
            max_batch_size=int(_wrapped(fields, "max_batch_size", cls.max_batch_size)),
            batch_timeout_micros=int(
                _wrapped(fields, "batch_timeout_micros", cls.batch_timeout_micros)
            ),
            num_batch_threads=int(_wrapped(fields, "num_batch_threads", cls.num_batch_threads)),
            max_enqueued_batches=int(
                _wrapped(fields, "max_enqueued_batches", cls.max_enqueued_batches)
            ),
        )
        for ignored in ("allowed_batch_sizes", "pad_variable_length_inputs"):
            if ignored in fields:
                logger.info(
                    "batching parameter %s is accepted but not used by the stand-in "
                    "(requests whose inner dims differ are never merged)",
                    ignored,
                )
        if params.max_batch_size < 1 or params.num_batch_threads < 1:
            raise ValueError("max_batch_size and num_batch_threads must be positive")
        return params

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BatchingParameters:
        with open(path, encoding="utf-8") as f:
            return cls.from_text(f.read())


# --------------------------------------------------------------------------------------------
# JSON <-> tensors (after tensorflow_serving/util/json_tensor.cc)
# --------------------------------------------------------------------------------------------


def _dt():
    from tensorflow.core.framework import types_pb2

    return types_pb2


def _dtype_name(dtype: int) -> str:
    try:
        return _dt().DataType.Name(dtype)
    except ValueError:
        return str(dtype)


def _json_str(value: Any, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _type_error(value: Any, dtype: int) -> ServingStatusError:
    return _invalid(
        f"JSON Value: {_json_str(value)} Type: {_json_type(value)} is not of expected type: "
        f"{_dtype_name(dtype)}"
    )


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_B64_KEY), str)


def _b64decode(value: dict) -> bytes:
    # absl::Base64Unescape accepts missing padding; web-safe characters are accepted here too.
    text = "".join(value[_B64_KEY].split()).replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("Unable to base64 decode") from None


_INT_RANGES: dict[str, tuple[int, int]] = {
    "DT_INT8": (-(2**7), 2**7 - 1),
    "DT_UINT8": (0, 2**8 - 1),
    "DT_INT16": (-(2**15), 2**15 - 1),
    "DT_INT32": (-(2**31), 2**31 - 1),
    "DT_INT64": (-(2**63), 2**63 - 1),
    "DT_UINT32": (0, 2**32 - 1),
    "DT_UINT64": (0, 2**64 - 1),
}
_FLOAT_LIMITS = {"DT_FLOAT": (24, 3.4028234663852886e38), "DT_DOUBLE": (53, sys.float_info.max)}
_NUMPY_DTYPES = {
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_HALF": np.float16,
    "DT_INT8": np.int8,
    "DT_UINT8": np.uint8,
    "DT_INT16": np.int16,
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT32": np.uint32,
    "DT_UINT64": np.uint64,
    "DT_BOOL": np.bool_,
    "DT_STRING": object,
}


def _leaf_value(value: Any, dtype: int) -> Any:
    name = _dtype_name(dtype)
    if name == "DT_STRING":
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:
                raise _invalid(f"JSON Value: {_json_str(value)} is not valid UTF-8") from None
        if isinstance(value, dict):
            if not _is_b64(value):
                raise _invalid(
                    f"JSON Value: {_json_str(value)} not formatted correctly for base64 data"
                )
            return _b64decode(value)
        raise _type_error(value, dtype)
    if name in _FLOAT_LIMITS or name == "DT_HALF":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(value, dtype)
        digits, max_value = _FLOAT_LIMITS.get(name, (11, 65504.0))
        if isinstance(value, int):
            lossy = abs(value) > (1 << digits) - 1
        else:
            lossy = math.isfinite(value) and abs(value) > max_value
        if lossy:
            target = {"DT_FLOAT": "float", "DT_DOUBLE": "double"}.get(name, "half")
            raise _invalid(
                f"Cannot convert JSON value: {_json_str(value)} to {target} without loss of "
                "precision."
            )
        return value
    if name in _INT_RANGES:
        low, high = _INT_RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _type_error(value, dtype)
        return value
    if name == "DT_BOOL":
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    raise ServingStatusError(501, f"Conversion of JSON Value: {_json_str(value)} to type: {name}")


def _dense_shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > _MAX_JSON_RANK:
            raise _invalid(f"JSON lists are nested deeper than {_MAX_JSON_RANK} levels")
        if not value:
            break
        value = value[0]
    return shape


def _fill(value: Any, level: int, shape: list[int], dtype: int, out: list[Any]) -> None:
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise _invalid(
                f"JSON Value: {_json_str(value)} found at incorrect level: {level + 1} in the "
                f"JSON DOM. Expected at level: {rank}"
            )
        out.append(_leaf_value(value, dtype))
        return
    if level >= rank:
        raise _invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise _invalid(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected "
            f"size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def json_to_array(value: Any, dtype: int) -> np.ndarray:
    """One JSON value (scalar or nested lists) as an array of the TF ``dtype`` enum."""
    shape = _dense_shape(value)
    flat: list[Any] = []
    _fill(value, 0, shape, dtype, flat)
    np_dtype = _NUMPY_DTYPES[_dtype_name(dtype)]
    if np_dtype is object:
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
    else:
        array = np.asarray(flat, dtype=np_dtype)
    return array.reshape(shape)


def _shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _instances_to_arrays(instances: Any, input_infos: Mapping[str, Any]) -> dict[str, np.ndarray]:
    names = sorted(input_infos)

    def is_object(v: Any) -> bool:
        return isinstance(v, dict) and not _is_b64(v)

    if not isinstance(instances[0], dict) and len(names) > 1:
        raise _invalid(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    objects = is_object(instances[0])
    rows: dict[str, list[np.ndarray]] = {name: [] for name in names}

    def add(item: Any, name: str, index: int, key: str | None) -> None:
        where = f"{index}" + (f" key: {name}" if key is not None else "")
        try:
            if name not in input_infos:
                raise _invalid(f"JSON object: does not have named input: {name}")
            array = json_to_array(item, input_infos[name].dtype)
            if rows[name]:
                first = rows[name][0]
                if first.size != array.size:
                    raise _invalid(f"Expecting tensor size: {first.size} but got: {array.size}")
                if first.shape != array.shape:
                    raise _invalid(
                        f"Expecting shape {_shape_str(first.shape)} but got: "
                        f"{_shape_str(array.shape)}"
                    )
        except ServingStatusError as e:
            raise ServingStatusError(
                e.http_status,
                f"Failed to process element: {where} of 'instances' list. Error: {e.message}",
            ) from None
        rows[name].append(array)

    for index, element in enumerate(instances):
        if objects:
            if not is_object(element):
                raise _invalid(f"Expecting object but got list at item {index} of input list")
            for key, item in element.items():
                add(item, key, index, key)
            if set(element) != set(names):
                raise _invalid(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{_json_str(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_object(element):
                raise _invalid(f"Expecting value/list but got object at item {index} of input list")
            add(element, names[0], index, None)
    arrays = {}
    for name, items in rows.items():
        np_dtype = _NUMPY_DTYPES[_dtype_name(input_infos[name].dtype)]
        if np_dtype is object:
            stacked = np.empty((len(items), *items[0].shape), dtype=object)
            flat_view = stacked.reshape(len(items), -1)
            for i, item in enumerate(items):
                flat_view[i, :] = item.reshape(-1)
        else:
            stacked = np.stack(items).astype(np_dtype, copy=False)
        arrays[name] = stacked
    return arrays


def _inputs_to_arrays(inputs: Any, input_infos: Mapping[str, Any]) -> dict[str, np.ndarray]:
    names = sorted(input_infos)
    if not isinstance(inputs, dict) or _is_b64(inputs):
        if len(names) > 1:
            raise _invalid(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        return {names[0]: json_to_array(inputs, input_infos[names[0]].dtype)}
    arrays = {}
    for name in names:
        if name not in inputs:
            raise _invalid(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = json_to_array(inputs[name], input_infos[name].dtype)
    return arrays


def _float_list(array: np.ndarray) -> Any:
    # Shortest repr that round-trips in the tensor's own precision (as TF Serving writes them).
    return array.astype(str).astype(np.float64).tolist()


def array_to_json(array: np.ndarray, name: str) -> Any:
    """A tensor as JSON values: strings as UTF-8, ``*_bytes`` outputs as ``{"b64": ...}``."""
    if array.dtype == object or array.dtype.kind in "SU":
        as_bytes = name.endswith(_BYTES_SUFFIX)

        def convert(value: Any) -> Any:
            if isinstance(value, str):
                value = value.encode("utf-8")
            if as_bytes:
                return {_B64_KEY: base64.b64encode(value).decode("ascii")}
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                raise _invalid(
                    f"Output tensor '{name}' holds bytes that are not valid UTF-8 (TF Serving "
                    "would write them unescaped into the JSON; name the output with a '_bytes' "
                    "suffix to get base64)"
                ) from None

        flat = [convert(v) for v in array.reshape(-1).tolist()]
        if array.ndim == 0:
            return flat[0]
        nested = np.empty(len(flat), dtype=object)
        nested[:] = flat
        return nested.reshape(array.shape).tolist()
    if array.dtype in (np.float32, np.float16):
        return _float_list(array)
    if array.dtype.kind in "biuf":
        return array.tolist()
    raise _invalid(f"Failed to write JSON value for tensor type: {array.dtype}")


def make_predict_response(outputs: Mapping[str, np.ndarray], row_format: bool) -> dict[str, Any]:
    """TF Serving's ``predictions`` (row) or ``outputs`` (columnar) JSON for output tensors."""
    if not outputs:
        raise _invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return {"outputs": array_to_json(outputs[names[0]], names[0])}
        return {"outputs": {n: array_to_json(outputs[n], n) for n in names}}
    batch = None
    for n in names:
        array = outputs[n]
        if array.ndim == 0:
            raise _invalid(f"Tensor name: {n} has no shape information ")
        if batch is not None and array.shape[0] != batch:
            raise _invalid(
                f"Tensor name: {n} has inconsistent batch size: {array.shape[0]} expecting: {batch}"
            )
        batch = array.shape[0]
    columns = {n: array_to_json(outputs[n], n) for n in names}
    if len(names) == 1:
        return {"predictions": columns[names[0]]}
    return {"predictions": [{n: columns[n][i] for n in names} for i in range(batch or 0)]}


# --------------------------------------------------------------------------------------------
# Servables
# --------------------------------------------------------------------------------------------


def _import_tf_text() -> None:
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        logger.info("tensorflow_text is not installed; tf-text ops are not registered")


def is_complete_saved_model(path: str | os.PathLike[str]) -> bool:
    return os.path.isfile(os.path.join(path, "saved_model.pb")) or os.path.isfile(
        os.path.join(path, "saved_model.pbtxt")
    )


class Servable:
    """One loaded model version: its own ``Graph`` + ``Session`` through the TF1 loader."""

    def __init__(
        self,
        name: str,
        version: int,
        path: str,
        *,
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
        run_timeout_ms: int = 0,
        xla_compilation_enabled: bool = False,
    ) -> None:
        import tensorflow as tf

        _import_tf_text()
        self.name = name
        self.version = version
        self.path = path
        config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=intra_op_threads,
            inter_op_parallelism_threads=inter_op_threads,
        )
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=config)
        self._run_options = (
            tf.compat.v1.RunOptions(timeout_in_ms=run_timeout_ms) if run_timeout_ms else None
        )
        try:
            with self._graph.as_default(), silence_tf_deprecation():
                self.meta_graph_def = tf.compat.v1.saved_model.loader.load(
                    self._session, [SERVE_TAG], path
                )
            needs_xla = (
                [] if xla_compilation_enabled else xla_requirements(self.meta_graph_def.graph_def)
            )
            if needs_xla:
                raise tf.errors.InternalError(
                    None,
                    None,
                    "XLA compilation disabled: this SavedModel needs XLA compilation ("
                    + "; ".join(needs_xla[:5])
                    + (f"; and {len(needs_xla) - 5} more" if len(needs_xla) > 5 else "")
                    + "), which tensorflow_model_server disables unless started with "
                    f"{XLA_FLAG}",
                )
        except Exception:
            self._session.close()
            raise
        self.signatures = dict(self.meta_graph_def.signature_def)
        self._op_error = tf.errors.OpError
        self.batcher: BatchScheduler | None = None
        self._in_flight = 0
        self._idle = threading.Condition()

    def acquire(self) -> None:
        """Count a request in; :meth:`close` waits for the counted requests to finish."""
        with self._idle:
            self._in_flight += 1

    def release(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def signature(self, signature_name: str | None) -> Any:
        name = signature_name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise _invalid(f'Serving signature name: "{name}" not found in signature def')
        return self.signatures[name]

    def run(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run a signature on named input arrays (aliases as in the SignatureDef)."""
        signature = self.signature(signature_name)
        if set(arrays) != set(signature.inputs):
            raise _invalid(
                f"Request inputs {sorted(arrays)} do not match the inputs of signature "
                f"{signature_name!r}: {sorted(signature.inputs)}"
            )
        feeds = {signature.inputs[alias].name: arrays[alias] for alias in arrays}
        fetches = {alias: info.name for alias, info in signature.outputs.items()}
        if not fetches:
            raise _invalid(f"Signature {signature_name!r} has no outputs")
        try:
            result = self._session.run(fetches, feed_dict=feeds, options=self._run_options)
        except self._op_error as e:
            # The C++ server answers the bare status message, without Python's prefix.
            message = re.sub(r"^Graph execution error:\s*", "", e.message)
            raise ServingStatusError(_HTTP_FOR_TF_CODE.get(e.error_code, 500), message) from None
        except (ValueError, TypeError) as e:  # feed shape/dtype checks in Session.run
            raise _invalid(str(e)) from None
        return {alias: np.asarray(value) for alias, value in result.items()}

    def predict(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> dict:
        if self.batcher is not None and self.batcher.can_batch(signature_name, arrays):
            return self.batcher.submit(signature_name, arrays)
        return self.run(signature_name, arrays)

    def signature_defs_json(self) -> dict[str, Any]:
        from google.protobuf import json_format

        def to_dict(message: Any) -> dict[str, Any]:
            try:
                return json_format.MessageToDict(
                    message,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
            except TypeError:  # protobuf < 5
                return json_format.MessageToDict(
                    message, preserving_proto_field_name=True, including_default_value_fields=True
                )

        return {name: to_dict(sig) for name, sig in self.signatures.items()}

    def close(self, wait_seconds: float = 60.0) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout=wait_seconds):
                logger.warning("closing %s v%d with requests in flight", self.name, self.version)
        if self.batcher is not None:
            self.batcher.stop()
        self._session.close()


# --------------------------------------------------------------------------------------------
# Dynamic batching
# --------------------------------------------------------------------------------------------


class _Task:
    __slots__ = ("signature", "arrays", "size", "key", "done", "result", "error")

    def __init__(self, signature: str, arrays: Mapping[str, np.ndarray], key: tuple) -> None:
        self.signature = signature
        self.arrays = arrays
        self.size = int(next(iter(arrays.values())).shape[0])
        self.key = key
        self.done = threading.Event()
        self.result: dict[str, np.ndarray] | None = None
        self.error: BaseException | None = None


class BatchScheduler:
    """Merges concurrent requests to the same signature into one session run.

    Requests are merged only when every signature input is batch-major (first dim -1) and the
    requests agree on dtypes and inner dimensions (no padding). Each merged batch holds at most
    ``max_batch_size`` rows; a batch runs once full or ``batch_timeout_micros`` after its first
    request arrived. As in TF Serving, outputs whose inner dims depend on the batch (e.g.
    padded token ids) are padded to the longest request in the merged batch.
    """

    def __init__(
        self,
        run: Callable[[str, Mapping[str, np.ndarray]], dict],
        params: BatchingParameters,
        signatures: Mapping[str, Any],
    ) -> None:
        self._run = run
        self._params = params
        self._signatures = signatures
        self._queue: collections.deque[_Task] = collections.deque()
        self._cond = threading.Condition()
        self._stopped = False
        # batches: session runs made for merged batches; tasks: requests they answered.
        self.stats = {"batches": 0, "tasks": 0}
        self._threads = [
            threading.Thread(target=self._loop, name=f"batch-{i}", daemon=True)
            for i in range(params.num_batch_threads)
        ]
        for t in self._threads:
            t.start()

    def can_batch(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> bool:
        signature = self._signatures.get(signature_name)
        if signature is None or not arrays or set(arrays) != set(signature.inputs):
            return False
        sizes = set()
        for alias, info in signature.inputs.items():
            dims = info.tensor_shape.dim
            if info.tensor_shape.unknown_rank or not dims or dims[0].size != -1:
                return False
            if arrays[alias].ndim == 0:
                return False
            sizes.add(arrays[alias].shape[0])
        return len(sizes) == 1

    def submit(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> dict:
        key = (signature_name,) + tuple(
            (alias, arrays[alias].dtype.str, arrays[alias].shape[1:]) for alias in sorted(arrays)
        )
        task = _Task(signature_name, arrays, key)
        if task.size > self._params.max_batch_size:
            raise _invalid(
                f"Task size {task.size} is larger than maximum input batch size "
                f"{self._params.max_batch_size}"
            )
        with self._cond:
            if self._stopped:
                raise ServingStatusError(503, "The model version is being unloaded")
            queued_rows = sum(t.size for t in self._queue)
            if queued_rows + task.size > self._params.max_batch_size * max(
                1, self._params.max_enqueued_batches
            ):
                raise ServingStatusError(
                    503, "The batch scheduling queue to which this task was submitted is full"
                )
            self._queue.append(task)
            self._cond.notify_all()
        task.done.wait()
        if task.error is not None:
            raise task.error
        if task.result is None:
            raise ServingStatusError(500, "The batched session run returned no result")
        return task.result

    def _take_batch(self) -> list[_Task] | None:
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if self._stopped and not self._queue:
                return None
            first = self._queue.popleft()
            batch, rows = [first], first.size
            deadline = time.monotonic() + self._params.batch_timeout_micros / 1e6
            while rows < self._params.max_batch_size:
                taken = False
                for task in list(self._queue):
                    if task.key == first.key and rows + task.size <= self._params.max_batch_size:
                        self._queue.remove(task)
                        batch.append(task)
                        rows += task.size
                        taken = True
                if rows >= self._params.max_batch_size:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped:
                    break
                if not taken:
                    self._cond.wait(remaining)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._run_batch(batch)
            except BaseException as e:  # never let a batch thread die
                for task in batch:
                    if not task.done.is_set():
                        task.error = e
                        task.done.set()

    def _run_batch(self, batch: list[_Task]) -> None:
        if len(batch) == 1:
            self._run_single(batch[0])
            return
        first = batch[0]
        merged = {
            alias: np.concatenate([t.arrays[alias] for t in batch], axis=0)
            for alias in first.arrays
        }
        total = sum(t.size for t in batch)
        try:
            outputs = self._run(first.signature, merged)
        except ServingStatusError:
            # One bad request must not fail the others: answer each on its own.
            for task in batch:
                self._run_single(task)
            return
        if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
            logger.warning(
                "signature %r: an output is not batch-major; running requests unbatched",
                first.signature,
            )
            for task in batch:
                self._run_single(task)
            return
        with self._cond:
            self.stats["batches"] += 1
            self.stats["tasks"] += len(batch)
        offset = 0
        for task in batch:
            task.result = {k: v[offset : offset + task.size] for k, v in outputs.items()}
            offset += task.size
            task.done.set()

    def _run_single(self, task: _Task) -> None:
        with self._cond:
            self.stats["batches"] += 1
            self.stats["tasks"] += 1
        try:
            task.result = self._run(task.signature, task.arrays)
        except BaseException as e:
            task.error = e
        task.done.set()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)


# --------------------------------------------------------------------------------------------
# Version management
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _VersionState:
    state: str
    error_code: str = "OK"
    error_message: str = ""
    stamp: float | None = None  # saved_model.pb mtime of a failed load (retry when it changes)


class ModelManager:
    """The versions of one model: discovers, loads and unloads them from its base path."""

    def __init__(
        self,
        config: ModelConfig,
        servable_options: Mapping[str, Any],
        batching: BatchingParameters | None,
    ) -> None:
        self.config = config
        self._options = dict(servable_options)
        self._batching = batching
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._servables: dict[int, Servable] = {}
        self._states: dict[int, _VersionState] = {}

    @property
    def name(self) -> str:
        return self.config.name

    def _version_dirs(self) -> dict[int, str]:
        base = self.config.base_path
        found = {}
        try:
            entries = os.listdir(base)
        except OSError as e:
            logger.warning("model %s: cannot list base path %s: %s", self.name, base, e)
            return found
        for entry in entries:
            path = os.path.join(base, entry)
            if entry.isdigit() and os.path.isdir(path) and is_complete_saved_model(path):
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
        """Load aspired versions that are new, unload the ones no longer aspired."""
        with self._scan_lock:
            available = self._version_dirs()
            aspired = self._aspired(available)
            for version in aspired:
                if version in self._servables:
                    continue
                path = available[version]
                stamp = _mtime(path)
                previous = self._states.get(version)
                if previous is not None and previous.state == "END" and previous.stamp == stamp:
                    continue  # failed before and unchanged since
                self._load(version, path, stamp)
            loaded_aspired = [v for v in aspired if v in self._servables]
            with self._lock:
                current = dict(self._servables)
            for version, servable in current.items():
                gone = version not in available
                # Availability-preserving: keep old versions until an aspired one is up.
                if gone or (version not in aspired and loaded_aspired):
                    with self._lock:
                        del self._servables[version]
                        self._states[version] = _VersionState("END")
                    servable.close()
                    logger.info("model %s: unloaded version %d", self.name, version)

    def _load(self, version: int, path: str, stamp: float | None) -> None:
        with self._lock:
            self._states[version] = _VersionState("LOADING")
        logger.info("model %s: loading version %d from %s", self.name, version, path)
        try:
            servable = Servable(self.name, version, path, **self._options)
        except Exception as e:  # a broken export must not take the server down
            logger.error("model %s: failed to load version %d: %s", self.name, version, e)
            with self._lock:
                self._states[version] = _VersionState(
                    "END", _tf_error_code_name(e), str(e).strip()[:2000], stamp
                )
            return
        if self._batching is not None:
            servable.batcher = BatchScheduler(servable.run, self._batching, servable.signatures)
        with self._lock:
            self._servables[version] = servable
            self._states[version] = _VersionState("AVAILABLE")
        logger.info("model %s: version %d is AVAILABLE", self.name, version)

    def _label_version(self, label: str) -> int:
        if label not in self.config.version_labels:
            raise _invalid(f"Unrecognized servable version label: {label}")
        return self.config.version_labels[label]

    def get(
        self, version: int | None = None, label: str | None = None, acquire: bool = False
    ) -> Servable:
        """The servable for a version/label (latest by default).

        With ``acquire``, the servable is counted in use (call ``release()`` when done) so an
        unload waits for the request instead of closing its session under it.
        """
        if label is not None:
            version = self._label_version(label)
        with self._lock:
            if version is None:
                if not self._servables:
                    raise _not_found(f"Servable not found for request: Latest({self.name})")
                servable = self._servables[max(self._servables)]
            else:
                servable = self._servables.get(version)
                if servable is None:
                    raise _not_found(
                        f"Servable not found for request: Specific({self.name}, {version})"
                    )
            if acquire:
                servable.acquire()
        return servable

    def status(self, version: int | None = None, label: str | None = None) -> dict[str, Any]:
        if label is not None:
            version = self._label_version(label)
        with self._lock:
            states = dict(self._states)
        if version is not None:
            if version not in states:
                raise _not_found(f"Could not find version {version} of model {self.name}")
            states = {version: states[version]}
        if not states:
            raise _not_found(f"Could not find any versions of model {self.name}")
        return {
            "model_version_status": [
                {
                    "version": str(v),
                    "state": s.state,
                    "status": {"error_code": s.error_code, "error_message": s.error_message},
                }
                for v, s in sorted(states.items(), reverse=True)
            ]
        }

    def batching_stats(self) -> dict[str, int]:
        """Session runs (``batches``) and requests (``tasks``) of the loaded versions' batchers."""
        total = {"batches": 0, "tasks": 0}
        with self._lock:
            batchers = [s.batcher for s in self._servables.values() if s.batcher is not None]
        for batcher in batchers:
            for key in total:
                total[key] += batcher.stats[key]
        return total

    def close(self) -> None:
        with self._lock:
            servables = list(self._servables.values())
            self._servables.clear()
        for servable in servables:
            servable.close()


def _mtime(path: str) -> float | None:
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        try:
            return os.path.getmtime(os.path.join(path, name))
        except OSError:
            continue
    return None


def _tf_error_code_name(error: BaseException) -> str:
    code = getattr(error, "error_code", None)
    names = {3: "INVALID_ARGUMENT", 5: "NOT_FOUND", 9: "FAILED_PRECONDITION", 13: "INTERNAL"}
    return names.get(code, "UNKNOWN")


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------

_PREDICT_RE = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_STATUS_RE = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:/versions/(\d+)|/labels/([^/:]+))?(?:/(metadata))?",
    re.IGNORECASE,
)
_V1_RE = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)


class _Handler(BaseHTTPRequestHandler):
    server_version = "keras-transformer-serving-standin/1"
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may stay idle or trickle its body
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        logger.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_POST

    def _handle(self) -> None:
        try:
            status, payload = self._dispatch()
        except ServingStatusError as e:
            status, payload = e.http_status, {"error": e.message}
        except Exception as e:  # never let a request kill the worker or leak a traceback
            logger.exception("internal error on %s %s", self.command, self.path)
            status, payload = 500, {"error": f"Internal error: {type(e).__name__}: {e}"}
        if status != 200:
            logger.info("%s %s -> %d %s", self.command, self.path, status, payload.get("error"))
        self._reply(status, payload)

    def _reply(self, status: int, payload: Mapping[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        limit = self.server.app.max_request_bytes
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked(limit)
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            return b""
        try:
            length = int(length_header)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise _invalid(f"Invalid Content-Length: {length_header!r}") from None
        if length > limit:
            # Drain a moderately oversized body so the client can read the answer.
            if length <= 4 * limit + (1 << 20):
                remaining = length
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 1 << 16))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            else:
                self.close_connection = True
            raise ServingStatusError(
                413, f"Request body of {length} bytes exceeds the limit of {limit} bytes"
            )
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            raise _invalid("Request body is shorter than its Content-Length")
        return body

    def _read_chunked(self, limit: int) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                raise _invalid("Malformed chunked request body") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                self.close_connection = True
                raise ServingStatusError(413, f"Request body exceeds the limit of {limit} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _dispatch(self) -> tuple[int, dict[str, Any]]:
        app = self.server.app
        path = urllib.parse.urlsplit(self.path).path
        method = self.command
        if method not in ("GET", "POST", "HEAD"):
            self.close_connection = True  # its body (if any) is never read
        body = self._read_body() if method == "POST" else b""
        if method == "POST":
            m = _PREDICT_RE.fullmatch(path)
            if m:
                name, version, label, verb = m.groups()
                if verb.lower() != "predict":
                    raise ServingStatusError(
                        501, f"{verb} is not implemented by the development stand-in server"
                    )
                return 200, app.predict(
                    urllib.parse.unquote(name),
                    int(version) if version else None,
                    urllib.parse.unquote(label) if label else None,
                    body,
                )
        elif method in ("GET", "HEAD"):
            m = _STATUS_RE.fullmatch(path)
            if m:
                name, version, label, metadata = m.groups()
                if not name:
                    raise _invalid("Missing model name in request.")
                args = (
                    urllib.parse.unquote(name),
                    int(version) if version else None,
                    urllib.parse.unquote(label) if label else None,
                )
                return 200, (app.metadata(*args) if metadata else app.status(*args))
        if _V1_RE.fullmatch(path):
            raise _invalid(f"Malformed request: {method} {path}")
        raise _not_found(f"Not found: {method} {path} (the REST API lives under /v1/)")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: ServingServer


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class ServingServer:
    """The stand-in server: model managers, version polling and the REST endpoint.

    Create it with :func:`start_server`. ``port``/``url`` give the bound address; use it as a
    context manager or call :meth:`stop`.
    """

    def __init__(
        self,
        models: Sequence[ModelConfig],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        poll_interval: float = DEFAULT_POLL_SECONDS,
        enable_batching: bool = False,
        batching_parameters: BatchingParameters | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_request_batch_size: int = DEFAULT_MAX_REQUEST_BATCH_SIZE,
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
        run_timeout_ms: int = 0,
        xla_compilation_enabled: bool = False,
    ) -> None:
        names = [m.name for m in models]
        if not models or len(set(names)) != len(names):
            raise ValueError(f"Need at least one model and unique model names, got {names}")
        self.max_request_bytes = int(max_request_bytes)
        self.max_request_batch_size = int(max_request_batch_size)
        self.poll_interval = float(poll_interval)
        batching = (batching_parameters or BatchingParameters()) if enable_batching else None
        options = {
            "intra_op_threads": intra_op_threads,
            "inter_op_threads": inter_op_threads,
            "run_timeout_ms": run_timeout_ms,
            "xla_compilation_enabled": xla_compilation_enabled,
        }
        self._managers = {m.name: ModelManager(m, options, batching) for m in models}
        self._host = host
        self._requested_port = port
        self._httpd: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ServingServer:
        """Load the current versions (synchronously), then start serving and polling."""
        self.refresh()
        for manager in self._managers.values():
            try:
                manager.status()
            except ServingStatusError:
                logger.warning(
                    "model %s: no servable version under %s yet",
                    manager.name,
                    manager.config.base_path,
                )
        self._httpd = _HTTPServer((self._host, self._requested_port), _Handler)
        self._httpd.app = self
        serve = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            daemon=True,
            name="rest-api",
        )
        serve.start()
        self._threads.append(serve)
        if self.poll_interval > 0:
            poll = threading.Thread(target=self._poll, daemon=True, name="version-poll")
            poll.start()
            self._threads.append(poll)
        logger.info(
            "Exporting HTTP/REST API at:%s:%d (development stand-in)", self._host, self.port
        )
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()
        for manager in self._managers.values():
            manager.close()

    def __enter__(self) -> ServingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception:
                logger.exception("version poll failed")

    def refresh(self) -> None:
        """Scan every base path now (what the background poll does each interval)."""
        for manager in self._managers.values():
            manager.scan()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # -- API ---------------------------------------------------------------------------------

    def batching_stats(self, name: str) -> dict[str, int]:
        """How many merged session runs answered how many requests (``--enable_batching``)."""
        return self._manager(name, "status", None).batching_stats()

    def _manager(self, name: str, kind: str, version: int | None) -> ModelManager:
        manager = self._managers.get(name)
        if manager is None:
            if kind == "status":
                raise _not_found(f"Could not find any versions of model {name}")
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise _not_found(f"Servable not found for request: {spec}")
        return manager

    def status(self, name: str, version: int | None = None, label: str | None = None) -> dict:
        return self._manager(name, "status", version).status(version, label)

    def metadata(self, name: str, version: int | None = None, label: str | None = None) -> dict:
        servable = self._manager(name, "metadata", version).get(version, label)
        return {
            "model_spec": {"name": name, "signature_name": "", "version": str(servable.version)},
            "metadata": {"signature_def": {"signature_def": servable.signature_defs_json()}},
        }

    def predict(
        self, name: str, version: int | None, label: str | None, body: bytes
    ) -> dict[str, Any]:
        request = _parse_json_request(body)
        signature_name = request.get("signature_name", DEFAULT_SIGNATURE)
        if not isinstance(signature_name, str):
            raise _invalid(
                f"JSON Value: {_json_str(request)} not formatted correctly. 'signature_name' "
                "key must be a string value."
            )
        signature_name = signature_name or DEFAULT_SIGNATURE
        servable = self._manager(name, "predict", version).get(version, label, acquire=True)
        try:
            return self._predict(servable, signature_name, request)
        finally:
            servable.release()

    def _predict(
        self, servable: Servable, signature_name: str, request: Mapping[str, Any]
    ) -> dict[str, Any]:
        signature = servable.signature(signature_name)
        input_infos = dict(signature.inputs)
        if not input_infos:
            raise _invalid(f"Failed to get input map for signature: {signature_name}")
        has_instances, has_inputs = "instances" in request, "inputs" in request
        if has_instances and has_inputs:
            raise _invalid(
                f"JSON Value: {_json_str(request)} Not formatted correctly expecting only one of "
                "'inputs' or 'instances' keys to exist "
            )
        if has_instances:
            instances = request["instances"]
            if not isinstance(instances, list):
                raise _invalid(
                    f"JSON Value: {_json_str(request)} Excepting 'instances' to be an list/array"
                )
            if not instances:
                raise _invalid(f"JSON Value: {_json_str(request)} No values in 'instances' array")
            self._check_batch(len(instances))
            arrays = _instances_to_arrays(instances, input_infos)
        elif has_inputs:
            arrays = _inputs_to_arrays(request["inputs"], input_infos)
            self._check_batch(max((a.shape[0] for a in arrays.values() if a.ndim), default=1))
        else:
            raise _invalid("Missing 'inputs' or 'instances' key")
        outputs = servable.predict(signature_name, arrays)
        return make_predict_response(outputs, row_format=has_instances)

    def _check_batch(self, size: int) -> None:
        if size > self.max_request_batch_size:
            raise _invalid(
                f"Request batch size {size} exceeds the limit of {self.max_request_batch_size} "
                "(--max_request_batch_size)"
            )


def _parse_json_request(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise _invalid("JSON Parse error: The document is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        message = f"JSON Parse error: Invalid encoding in string. at offset: {e.start}"
        raise _invalid(message) from None
    try:
        request = json.loads(text)
    except json.JSONDecodeError as e:
        raise _invalid(f"JSON Parse error: {e.msg} at offset: {e.pos}") from None
    except RecursionError:
        raise _invalid("JSON Parse error: the document is nested too deeply") from None
    if not isinstance(request, dict):
        raise _invalid(f"JSON Value: {_json_str(request)} Is not object")
    return request


def start_server(
    model_base_path: str | os.PathLike[str] | None = None,
    model_name: str = "default",
    *,
    model_config_file: str | os.PathLike[str] | None = None,
    models: Sequence[ModelConfig] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    poll_interval: float = DEFAULT_POLL_SECONDS,
    enable_batching: bool = False,
    batching_parameters: BatchingParameters | str | os.PathLike[str] | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_request_batch_size: int = DEFAULT_MAX_REQUEST_BATCH_SIZE,
    intra_op_threads: int = 0,
    inter_op_threads: int = 0,
    run_timeout_ms: int = 0,
    xla_compilation_enabled: bool = False,
) -> ServingServer:
    """Load the models and start serving; returns the running :class:`ServingServer`.

    Give exactly one of ``model_base_path`` (+ ``model_name``, default ``"default"`` as in
    TF Serving), ``model_config_file`` or ``models``. ``port=0`` binds a free port (see
    ``server.port``). ``batching_parameters`` may be a :class:`BatchingParameters` or the path
    of a ``batching.config`` file; it implies nothing unless ``enable_batching`` is true.
    """
    given = [x is not None for x in (model_base_path, model_config_file, models)]
    if sum(given) != 1:
        raise ValueError("Give exactly one of model_base_path, model_config_file or models")
    if model_base_path is not None:
        configs = [ModelConfig(model_name, os.path.abspath(os.fspath(model_base_path)))]
    elif model_config_file is not None:
        configs = load_model_config_file(model_config_file)
    else:
        configs = list(models or [])
    if batching_parameters is not None and not isinstance(batching_parameters, BatchingParameters):
        batching_parameters = BatchingParameters.from_file(batching_parameters)
    server = ServingServer(
        configs,
        host=host,
        port=port,
        poll_interval=poll_interval,
        enable_batching=enable_batching,
        batching_parameters=batching_parameters,
        max_request_bytes=max_request_bytes,
        max_request_batch_size=max_request_batch_size,
        intra_op_threads=intra_op_threads,
        inter_op_threads=inter_op_threads,
        run_timeout_ms=run_timeout_ms,
        xla_compilation_enabled=xla_compilation_enabled,
    )
    try:
        return server.start()
    except BaseException:
        server.stop()
        raise


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def build_arg_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The server's flags, added to `p` (a new parser by default)."""
    if p is None:
        p = argparse.ArgumentParser(
            prog="python -m keras_transformer.serving.server",
            description=(
                "Development stand-in for TF Serving's REST API (not TF Serving). Flags "
                "follow tensorflow_model_server where they exist."
            ),
        )
    p.add_argument("--model_name", default="default", help="name of the model (with base path)")
    p.add_argument("--model_base_path", default=None, help="directory holding version dirs")
    p.add_argument("--model_config_file", default=None, help="model_config_list text proto")
    p.add_argument("--rest_api_port", type=int, default=8501, help="0 picks a free port")
    p.add_argument("--rest_api_host", default="127.0.0.1", help="bind address (stand-in only)")
    p.add_argument(
        "--rest_api_timeout_in_ms",
        type=int,
        default=30000,
        help="session run timeout per request (0: none)",
    )
    p.add_argument(
        "--file_system_poll_wait_seconds",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        help="interval of the version poll (<=0: load once, never poll)",
    )
    p.add_argument("--enable_batching", action="store_true")
    p.add_argument(
        "--batching_parameters_file",
        default=None,
        help="BatchingParameters text proto (batching.config)",
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
    p.add_argument(
        "--xla_cpu_compilation_enabled",
        type=_parse_bool,
        nargs="?",
        const=True,
        default=False,
        help="allow graphs that need XLA compilation (TF Serving's flag; default false)",
    )
    p.add_argument("--log_level", default="INFO")
    return p


def _parse_bool(value: str) -> bool:
    """A boolean flag value as TF Serving's flag parser takes it (`true`/`false`, `1`/`0`)."""
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, received {value!r}")


def main(argv: Sequence[str] | None = None) -> int:
    return run_from_args(build_arg_parser().parse_args(argv))


def run_from_args(args: argparse.Namespace) -> int:
    """Starts the server from parsed `build_arg_parser` flags; serves until SIGINT/SIGTERM."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if (args.model_base_path is None) == (args.model_config_file is None):
        sys.stderr.write("Give exactly one of --model_base_path or --model_config_file\n")
        return 2
    server = start_server(
        args.model_base_path,
        args.model_name,
        model_config_file=args.model_config_file,
        host=args.rest_api_host,
        port=args.rest_api_port,
        poll_interval=args.file_system_poll_wait_seconds,
        enable_batching=args.enable_batching,
        batching_parameters=args.batching_parameters_file,
        max_request_bytes=args.max_request_bytes,
        max_request_batch_size=args.max_request_batch_size,
        intra_op_threads=args.tensorflow_intra_op_parallelism,
        inter_op_threads=args.tensorflow_inter_op_parallelism,
        run_timeout_ms=args.rest_api_timeout_in_ms,
        xla_compilation_enabled=args.xla_cpu_compilation_enabled,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    logger.warning(
        "This is a development stand-in with TF Serving's REST contract, not TF Serving. "
        "Serving at %s",
        server.url,
    )
    try:
        stop.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
