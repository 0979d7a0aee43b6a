"""The gRPC side of :class:`~keras_transformer.serving.client.ServingClient`.

It speaks TF Serving's ``PredictionService``/``ModelService`` through the generated stubs of
``tensorflow-serving-api`` and answers in the same shapes as the REST side (``predictions`` /
``outputs`` values, status and metadata dicts), so code can switch transports by URL
(``grpc://host:8500`` instead of ``http://host:8501``). Retries of UNAVAILABLE (a refused
connection, a full batching queue) are gRPC's own retry policy, with the client's backoff.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grpc
import numpy as np
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.serving.classify_codec import (
    RESULTS_KEY,
    fill_classification_request,
    make_classify_response,
)
from keras_transformer.serving.codec import make_predict_response, message_to_dict
from keras_transformer.serving.errors import HTTP_STATUS_FOR_CODE, ServingStatusError
from keras_transformer.serving.grpc_service import SIGNATURE_DEF_FIELD, tensor_proto_to_array

DEFAULT_SIGNATURE = "serving_default"
_MAX_ATTEMPTS = 5  # gRPC caps a retry policy's maxAttempts at 5


def _service_config(retries: int, backoff: float) -> str:
    policy = {
        "maxAttempts": min(_MAX_ATTEMPTS, retries + 1),
        "initialBackoff": f"{max(backoff, 0.001):.3f}s",
        "maxBackoff": "5s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    methods = [{"service": "tensorflow.serving.PredictionService"}]
    methods.append({"service": "tensorflow.serving.ModelService"})
    config: dict[str, Any] = {"methodConfig": [{"name": methods}]}
    if retries:
        config["methodConfig"][0]["retryPolicy"] = policy
    return json.dumps(config)


def _column(values: Any) -> np.ndarray:
    """A JSON-like value (strings, bytes, ``{"b64": ...}``, numbers, nested lists) as an array."""
    import base64

    def convert(value: Any) -> Any:
        if isinstance(value, Mapping) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (list, tuple)):
            return [convert(v) for v in value]
        return value

    converted = convert(values)
    array = np.array(converted, dtype=object) if _has_bytes(converted) else np.array(converted)
    if array.dtype == object and array.ndim == 0 and isinstance(converted, list):
        raise ValueError("Inputs must be rectangular lists")
    return array


def _typed_proto(array: np.ndarray, dtype: Any) -> Any:
    """``array`` as a TensorProto of the signature input's ``dtype`` (a ``tf.DType``), as the
    REST server reads JSON values by the signature: numbers as a floating input's type,
    integers as an integer input's where they fit, an empty list as an empty tensor of it;
    anything else as it is, for the server to refuse."""
    import tensorflow as tf

    if dtype is None or array.dtype == object:
        return tf.make_tensor_proto(array)
    if array.size == 0:
        return tf.make_tensor_proto(np.zeros(array.shape, dtype.as_numpy_dtype), dtype=dtype)
    if dtype.is_floating and array.dtype.kind in "iuf":
        return tf.make_tensor_proto(array.astype(dtype.as_numpy_dtype), dtype=dtype)
    if dtype.is_integer and array.dtype.kind in "iu":
        info = np.iinfo(dtype.as_numpy_dtype)
        if info.min <= array.min() and array.max() <= info.max:
            return tf.make_tensor_proto(array.astype(dtype.as_numpy_dtype), dtype=dtype)
    return tf.make_tensor_proto(array)


def _has_bytes(value: Any) -> bool:
    if isinstance(value, bytes):
        return True
    if isinstance(value, list):
        return any(_has_bytes(v) for v in value)
    return False


class GrpcTransport:
    """Requests of one :class:`ServingClient` over gRPC.

    Args:
        target: ``host:port``.
        model_name: the model.
        version: a pinned version, or None.
        label: a version label, or None.
        timeout: seconds per call (the gRPC deadline).
        retries: extra attempts on UNAVAILABLE (at most 4, gRPC's cap).
        backoff: the first retry delay in seconds (doubling, at most 5 s).
    """

    def __init__(
        self,
        target: str,
        model_name: str,
        version: int | None,
        label: str | None,
        timeout: float,
        retries: int,
        backoff: float,
    ) -> None:
        self.model_name, self.version, self.label = model_name, version, label
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.enable_retries", 1),
                ("grpc.service_config", _service_config(retries, backoff)),
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
            ],
        )
        self._predict = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)
        self._inputs: dict[str, dict[str, Any]] = {}

    def _spec(self, spec: Any, signature_name: str = "") -> None:
        spec.name = self.model_name
        if self.version is not None:
            spec.version.value = int(self.version)
        elif self.label is not None:
            spec.version_label = self.label
        if signature_name:
            spec.signature_name = signature_name

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as e:
            code = e.code().name if e.code() is not None else "UNKNOWN"
            code = code if code in HTTP_STATUS_FOR_CODE else "UNKNOWN"
            raise ServingStatusError(code, e.details() or str(e)) from None

    def _input_types(self, signature_name: str) -> dict[str, Any]:
        """The signature's inputs by alias, each with its ``tf.DType``."""
        import tensorflow as tf

        if signature_name not in self._inputs:
            signatures = self.signature_defs()
            if signature_name not in signatures:
                raise ServingStatusError(
                    "FAILED_PRECONDITION", f'Serving signature key "{signature_name}" not found.'
                )
            inputs = signatures[signature_name].inputs
            self._inputs[signature_name] = {k: tf.as_dtype(inputs[k].dtype) for k in sorted(inputs)}
        return self._inputs[signature_name]

    def _input_names(self, signature_name: str) -> list[str]:
        return list(self._input_types(signature_name))

    def _arrays(self, instances: Any, signature_name: str, columnar: bool) -> dict[str, Any]:
        if columnar and isinstance(instances, Mapping) and set(instances) != {"b64"}:
            return {name: _column(value) for name, value in instances.items()}
        names = self._input_names(signature_name)
        if columnar or not (instances and isinstance(instances[0], Mapping)):
            if len(names) != 1:
                raise ValueError(f"Signature {signature_name!r} has inputs {names}: name them")
            return {names[0]: _column(list(instances) if not columnar else instances)}
        return {name: _column([row[name] for row in instances]) for name in instances[0]}

    def predict(self, instances: Any, signature_name: str | None, columnar: bool) -> Any:
        """``Predict``; the ``predictions`` (row) or ``outputs`` (columnar) value."""
        signature_name = signature_name or DEFAULT_SIGNATURE
        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, signature_name)
        types = self._input_types(signature_name)
        for name, array in self._arrays(instances, signature_name, columnar).items():
            request.inputs[name].CopyFrom(_typed_proto(array, types.get(name)))
        response = self._call(self._predict.Predict, request)
        outputs = {k: tensor_proto_to_array(k, v) for k, v in response.outputs.items()}
        body = make_predict_response(outputs, row_format=not columnar)
        return body["outputs" if columnar else "predictions"]

    def classify(self, body: Mapping[str, Any]) -> list:
        """``Classify`` of a ``:classify`` JSON body; the ``results`` value."""
        signature_name = body.get("signature_name") or ""
        request = classification_pb2.ClassificationRequest()
        self._spec(request.model_spec, signature_name)
        fill_classification_request(body, signature_name, request)
        response = self._call(self._predict.Classify, request)
        return make_classify_response(response.result)[RESULTS_KEY]

    def _metadata(self) -> tuple[Any, Any]:
        request = get_model_metadata_pb2.GetModelMetadataRequest()
        self._spec(request.model_spec)
        request.metadata_field.append(SIGNATURE_DEF_FIELD)
        response = self._call(self._predict.GetModelMetadata, request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(signature_map)
        return response, signature_map

    def signature_defs(self) -> Mapping[str, Any]:
        """The SignatureDefs of the model spec's version, by name."""
        return self._metadata()[1].signature_def

    def metadata(self) -> dict[str, Any]:
        """``GetModelMetadata`` in the REST answer's shape."""
        response, signature_map = self._metadata()
        return {
            "model_spec": message_to_dict(response.model_spec),
            "metadata": {SIGNATURE_DEF_FIELD: message_to_dict(signature_map)},
        }

    def status(self) -> dict[str, Any]:
        """``GetModelStatus`` in the REST answer's shape."""
        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec)
        return message_to_dict(self._call(self._models.GetModelStatus, request))

    def close(self) -> None:
        self._channel.close()
