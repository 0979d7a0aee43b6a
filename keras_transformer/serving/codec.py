"""JSON <-> tensors for TF Serving's REST API (after ``tensorflow_serving/util/json_tensor.cc``).

Requests: the row (``instances``) and columnar (``inputs``) formats, ``{"b64": ...}`` for
binary strings, TF Serving's type rules and error messages. Responses: ``predictions`` or
``outputs``, strings as UTF-8, outputs named ``*_bytes`` as ``{"b64": ...}``, floats in the
shortest form that round-trips in the tensor's precision.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import rapidjson

from keras_transformer.serving.errors import ServingStatusError, invalid

_MAX_JSON_RANK = 32
_B64_KEY = "b64"
BYTES_SUFFIX = "_bytes"


def _dt():
    from tensorflow.core.framework import types_pb2

    return types_pb2


def _dtype_name(dtype: int) -> str:
    try:
        return _dt().DataType.Name(dtype)
    except ValueError:
        return str(dtype)


_MAX_JSON_DEBUG_BYTES = 256


def json_str(value: Any) -> str:
    """``JsonValueToDebugString``: rapidjson's ``PrettyWriter`` with single-line arrays (what
    TF Serving quotes in its messages), cut at 256 bytes."""
    try:
        text = rapidjson.dumps(
            value, indent=4, write_mode=rapidjson.WM_SINGLE_LINE_ARRAY, ensure_ascii=False
        )
    except (TypeError, ValueError, OverflowError):
        text = repr(value)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= _MAX_JSON_DEBUG_BYTES:
        return text
    return data[:_MAX_JSON_DEBUG_BYTES].decode("utf-8", "ignore")


def json_type(value: Any) -> str:
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


def data_type_string(dtype: int) -> str:
    """TF's ``DataTypeString``: ``DT_FLOAT`` is "float", ``DT_STRING`` "string", ..."""
    name = _dtype_name(dtype)
    return name[3:].lower() if name.startswith("DT_") else name


def _type_error(value: Any, dtype: int) -> ServingStatusError:
    return invalid(
        f"JSON Value: {json_str(value)} Type: {json_type(value)} is not of expected type: "
        f"{data_type_string(dtype)}"
    )


def is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_B64_KEY), str)


def b64decode(value: dict) -> bytes:
    # absl::Base64Unescape (absl/strings/escaping.cc): the standard alphabet only (not the
    # web-safe "-" and "_"), whitespace skipped, padding optional.
    text = "".join(value[_B64_KEY].split())
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("Unable to base64 decode") from None


# AddValueToTensor: IsInt() (int32) for the small int types, whose int_val entries the tensor
# then casts (wrapping), IsInt64(), IsUint(), IsUint64() for the others.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "DT_INT8": (-(2**31), 2**31 - 1),
    "DT_UINT8": (-(2**31), 2**31 - 1),
    "DT_INT16": (-(2**31), 2**31 - 1),
    "DT_INT32": (-(2**31), 2**31 - 1),
    "DT_INT64": (-(2**63), 2**63 - 1),
    "DT_UINT32": (0, 2**32 - 1),
    "DT_UINT64": (0, 2**64 - 1),
}
_WRAPPED_INTS = ("DT_INT8", "DT_UINT8", "DT_INT16")
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
                raise invalid(f"JSON Value: {json_str(value)} is not valid UTF-8") from None
        if isinstance(value, dict):
            if not is_b64(value):
                raise invalid(
                    f"JSON Value: {json_str(value)} not formatted correctly for base64 data"
                )
            return b64decode(value)
        raise _type_error(value, dtype)
    if name in ("DT_FLOAT", "DT_DOUBLE"):
        # Any number, converted as the hardware does (api_rest.md, "Floating Point
        # Precision": 1435774380 becomes 1435774336 as a float).
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(value, dtype)
        return float(value)
    if name in _INT_RANGES:
        low, high = _INT_RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _type_error(value, dtype)
        return value
    if name == "DT_BOOL":
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    raise ServingStatusError(
        "UNIMPLEMENTED",
        f"Conversion of JSON Value: {json_str(value)} to type: {data_type_string(dtype)}",
    )


def _dense_shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > _MAX_JSON_RANK:
            raise invalid(f"JSON lists are nested deeper than {_MAX_JSON_RANK} levels")
        if not value:
            break
        value = value[0]
    return shape


def _fill(value: Any, level: int, shape: list[int], dtype: int, out: list[Any]) -> None:
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid(
                f"JSON Value: {json_str(value)} found at incorrect level: {level + 1} in the "
                f"JSON DOM. Expected at level: {rank}"
            )
        out.append(_leaf_value(value, dtype))
        return
    if level >= rank:
        raise invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise invalid(
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
    elif _dtype_name(dtype) in _WRAPPED_INTS:
        array = np.asarray(flat, dtype=np.int64).astype(np_dtype)
    else:
        array = np.asarray(flat, dtype=np_dtype)
    return array.reshape(shape)


def _shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _instances_to_arrays(instances: Any, input_infos: Mapping[str, Any]) -> dict[str, np.ndarray]:
    names = sorted(input_infos)

    def is_object(v: Any) -> bool:
        return isinstance(v, dict) and not is_b64(v)

    if not isinstance(instances[0], dict) and len(names) > 1:
        raise invalid(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    objects = is_object(instances[0])
    rows: dict[str, list[np.ndarray]] = {name: [] for name in names}

    def add(item: Any, name: str, index: int, key: str | None) -> None:
        where = f"{index}" + (f" key: {name}" if key is not None else "")
        try:
            if name not in input_infos:
                raise invalid(f"JSON object: does not have named input: {name}")
            array = json_to_array(item, input_infos[name].dtype)
            if rows[name]:
                first = rows[name][0]
                if first.size != array.size:
                    raise invalid(f"Expecting tensor size: {first.size} but got: {array.size}")
                if first.shape != array.shape:
                    raise invalid(
                        f"Expecting shape {_shape_str(first.shape)} but got: "
                        f"{_shape_str(array.shape)}"
                    )
        except ServingStatusError as e:
            # TF Serving appends the item's status.ToString(): "INVALID_ARGUMENT: ...".
            raise invalid(
                f"Failed to process element: {where} of 'instances' list. Error: "
                f"{e.code}: {e.message}"
            ) from None
        rows[name].append(array)

    for index, element in enumerate(instances):
        if objects:
            if not is_object(element):
                raise invalid(f"Expecting object but got list at item {index} of input list")
            for key, item in element.items():
                add(item, key, index, key)
            if set(element) != set(names):
                raise invalid(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{json_str(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_object(element):
                raise invalid(f"Expecting value/list but got object at item {index} of input list")
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
    if not isinstance(inputs, dict) or is_b64(inputs):
        if len(names) > 1:
            raise invalid(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        return {names[0]: json_to_array(inputs, input_infos[names[0]].dtype)}
    arrays = {}
    for name in names:
        if name not in inputs:
            raise invalid(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = json_to_array(inputs[name], input_infos[name].dtype)
    return arrays


# The output dtypes json_tensor.cc's AddSingleValueAndAdvance writes (besides float and
# string); half, uint16, complex, ... are "Failed to write JSON value for tensor type: ...".
_JSON_WRITABLE = tuple(
    np.dtype(t)
    for t in (
        np.float64,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint32,
        np.uint64,
        np.bool_,
    )
)


def _float_list(array: np.ndarray) -> Any:
    # Shortest repr that round-trips in the tensor's own precision (as TF Serving writes them).
    return array.astype(str).astype(np.float64).tolist()


def array_to_json(array: np.ndarray, name: str) -> Any:
    """A tensor as JSON values: strings as UTF-8, ``*_bytes`` outputs as ``{"b64": ...}``."""
    if array.dtype == object or array.dtype.kind in "SU":
        as_bytes = name.endswith(BYTES_SUFFIX)

        def convert(value: Any) -> Any:
            if isinstance(value, str):
                value = value.encode("utf-8")
            if as_bytes:
                return {_B64_KEY: base64.b64encode(value).decode("ascii")}
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                raise invalid(
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
    if array.dtype == np.float32:
        return _float_list(array)
    if array.dtype in _JSON_WRITABLE:
        return array.tolist()
    import tensorflow as tf

    try:
        dtype_name = data_type_string(tf.dtypes.as_dtype(array.dtype).as_datatype_enum)
    except TypeError:
        dtype_name = str(array.dtype)
    raise invalid(f"Failed to write JSON value for tensor type: {dtype_name}")


def make_predict_response(outputs: Mapping[str, np.ndarray], row_format: bool) -> dict[str, Any]:
    """TF Serving's ``predictions`` (row) or ``outputs`` (columnar) JSON for output tensors."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return {"outputs": array_to_json(outputs[names[0]], names[0])}
        return {"outputs": {n: array_to_json(outputs[n], n) for n in names}}
    batch = None
    for n in names:
        array = outputs[n]
        if array.ndim == 0:
            raise invalid(f"Tensor name: {n} has no shape information ")
        if batch is not None and array.shape[0] != batch:
            raise invalid(
                f"Tensor name: {n} has inconsistent batch size: {array.shape[0]} expecting: {batch}"
            )
        batch = array.shape[0]
    columns = {n: array_to_json(outputs[n], n) for n in names}
    if len(names) == 1:
        return {"predictions": columns[names[0]]}
    return {"predictions": [{n: columns[n][i] for n in names} for i in range(batch or 0)]}


def decode_predict_request(
    request: Mapping[str, Any], input_infos: Mapping[str, Any], signature_name: str
) -> tuple[dict[str, np.ndarray], bool]:
    """The input arrays of a parsed ``:predict`` request, and whether it is in row format.

    Args:
        request: the JSON object (``instances`` or ``inputs``).
        input_infos: the signature's ``TensorInfo`` by input alias.
        signature_name: the request's (may be empty), for the error message when the
            signature has no inputs.

    Returns:
        ``(arrays by input alias, row_format)``.
    """
    if not input_infos:
        raise invalid(f"Failed to get input map for signature: {signature_name or 'DEFAULT'}")
    has_instances, has_inputs = "instances" in request, "inputs" in request
    if has_instances and has_inputs:
        raise invalid(
            f"JSON Value: {json_str(request)} Not formatted correctly expecting only one of "
            "'inputs' or 'instances' keys to exist "
        )
    if has_instances:
        instances = request["instances"]
        if not isinstance(instances, list):
            raise invalid(
                f"JSON Value: {json_str(request)} Expecting 'instances' to be an list/array"
            )
        if not instances:
            raise invalid(f"JSON Value: {json_str(request)} No values in 'instances' array")
        return _instances_to_arrays(instances, input_infos), True
    if has_inputs:
        return _inputs_to_arrays(request["inputs"], input_infos), False
    raise invalid("Missing 'inputs' or 'instances' key")


def message_to_dict(message: Any) -> dict[str, Any]:
    """A proto as TF Serving's REST answers print it: proto field names, fields at their
    default values included, int64 as strings, enums by name."""
    from google.protobuf import json_format

    try:
        return json_format.MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:  # protobuf < 5
        return json_format.MessageToDict(
            message, preserving_proto_field_name=True, including_default_value_fields=True
        )
