"""TF Serving's gRPC API: ``PredictionService`` and ``ModelService``, on grpcio.

The servicers implement the generated bases of ``tensorflow-serving-api``
(``prediction_service_pb2_grpc``, ``model_service_pb2_grpc``), so a client written for
TF Serving works unchanged: ``Predict``, ``Classify`` (``classifier.py``),
``GetModelMetadata``, ``GetModelStatus`` and ``HandleReloadConfigRequest`` answer with TF
Serving's messages and status codes (``prediction_service_impl.cc``, ``predict_util.cc``,
``classification_service.cc``, ``get_model_metadata_impl.cc``, ``get_model_status_impl.cc``,
``model_service_impl.cc``); the other methods (``Regress``, ``MultiInference``) answer
UNIMPLEMENTED. Each method is counted in the server's metrics (``monitoring``'s
``counted_rpc``). Outputs are written into the typed value fields
(``string_val``, ``float_val``, ...), as TF Serving does by default.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

import grpc
import numpy as np
from tensorflow_serving.apis import (
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.serving.config import models_of
from keras_transformer.serving.core import ServerCore
from keras_transformer.serving.errors import ServingStatusError, invalid
from keras_transformer.serving.monitoring import counted_rpc
from keras_transformer.serving.servable import DEFAULT_SIGNATURE

logger = logging.getLogger(__name__)

SIGNATURE_DEF_FIELD = "signature_def"

# dtype name -> the TensorProto field TF's Tensor::AsProtoField writes it to.
_VALUE_FIELDS = {
    "float32": "float_val",
    "float64": "double_val",
    "int32": "int_val",
    "int16": "int_val",
    "int8": "int_val",
    "uint8": "int_val",
    "uint16": "int_val",
    "int64": "int64_val",
    "uint32": "uint32_val",
    "uint64": "uint64_val",
    "bool": "bool_val",
    "string": "string_val",
}


def tensor_proto_to_array(alias: str, proto: Any) -> np.ndarray:
    """A request's ``TensorProto`` as an array (INVALID_ARGUMENT when it does not parse)."""
    import tensorflow as tf

    try:
        return tf.make_ndarray(proto)
    except (TypeError, ValueError):  # saved_model::GetInputValues' words
        raise invalid(f"tensor parsing error: {alias}") from None


def array_to_tensor_proto(array: np.ndarray) -> Any:
    """An output array as ``TensorProto``, values in the typed field (``AsProtoField``)."""
    import tensorflow as tf

    is_string = array.dtype == object or array.dtype.kind in "SU"
    dtype = tf.string if is_string else tf.dtypes.as_dtype(array.dtype)
    field = _VALUE_FIELDS.get(dtype.name)
    if field is None:  # e.g. half, complex: TF's own encoding
        return tf.make_tensor_proto(array)
    proto = tf.make_tensor_proto([], dtype=dtype, shape=[0])
    proto.tensor_shape.Clear()
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    flat = array.reshape(-1).tolist()
    if is_string:
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in flat]
    getattr(proto, field).extend(flat)
    return proto


def _spec(model_spec: Any) -> tuple[str, int | None, str | None]:
    choice = model_spec.WhichOneof("version_choice")
    version = int(model_spec.version.value) if choice == "version" else None
    label = model_spec.version_label if choice == "version_label" else None
    return model_spec.name, version, label


def _abort(context: grpc.ServicerContext, error: ServingStatusError) -> None:
    if error.code != "NOT_FOUND":
        logger.info("gRPC -> %s %s", error.code, error.message)
    context.abort(grpc.StatusCode[error.code], error.grpc_message)


def deadline_ms(context: grpc.ServicerContext) -> int:
    """The session-run timeout of an RPC: what is left of the client's deadline, as TF
    Serving's ``DeadlineToTimeoutMillis(context->raw_deadline())`` (0: the client set none)."""
    remaining = context.time_remaining()
    if remaining is None:
        return 0
    return max(1, int(remaining * 1e3))


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """``tensorflow.serving.PredictionService``: ``Predict``, ``Classify`` and ``GetModelMetadata``.

    Args:
        core: the models.
        enforce_session_run_timeout: TF Serving's ``--enforce_session_run_timeout`` (default
            true): a session run ends with DEADLINE_EXCEEDED at the client's deadline.
            ``--rest_api_timeout_in_ms`` is REST's alone.
    """

    def __init__(self, core: ServerCore, enforce_session_run_timeout: bool = True) -> None:
        self.core = core
        self.enforce_session_run_timeout = enforce_session_run_timeout

    @counted_rpc("Predict", tf_serving_api="Predict")
    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            if not request.HasField("model_spec"):
                raise invalid("Missing ModelSpec")
            signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
            servable = self.core.servable(*_spec(request.model_spec))
            try:
                # The signature and the inputs' names before their tensors (RunPredict).
                servable.check_inputs(signature_name, list(request.inputs))
                arrays = {
                    alias: tensor_proto_to_array(alias, request.inputs[alias])
                    for alias in sorted(request.inputs)
                }
                timeout = deadline_ms(context) if self.enforce_session_run_timeout else 0
                outputs = self.core.predict(
                    servable, signature_name, arrays, list(request.output_filter), timeout
                )
            finally:
                servable.release()
            response = predict_pb2.PredictResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature_name
            for alias, array in outputs.items():
                response.outputs[alias].CopyFrom(array_to_tensor_proto(array))
            return response
        except ServingStatusError as e:
            _abort(context, e)

    @counted_rpc("Classify", tf_serving_api="Classify")
    def Classify(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            if not request.HasField("model_spec"):
                raise invalid("Missing ModelSpec")
            servable = self.core.servable(*_spec(request.model_spec))
            try:
                timeout = deadline_ms(context) if self.enforce_session_run_timeout else 0
                return self.core.classify(servable, request, timeout)
            finally:
                servable.release()
        except ServingStatusError as e:
            _abort(context, e)

    @counted_rpc("GetModelMetadata", tf_serving_api=None)
    def GetModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            if not request.HasField("model_spec"):
                raise invalid("Missing ModelSpec")
            if not request.metadata_field:
                raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
            for field in request.metadata_field:
                if field != SIGNATURE_DEF_FIELD:
                    raise invalid(f"Metadata field {field} is not supported")
            servable = self.core.servable(*_spec(request.model_spec))
            try:
                return self.core.metadata(servable)
            finally:
                servable.release()
        except ServingStatusError as e:
            _abort(context, e)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """``tensorflow.serving.ModelService``: ``GetModelStatus`` and
    ``HandleReloadConfigRequest``."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core

    @counted_rpc("GetModelStatus", tf_serving_api=None)
    def GetModelStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            if not request.HasField("model_spec"):
                raise invalid("Missing ModelSpec")
            return self.core.status(*_spec(request.model_spec))
        except ServingStatusError as e:
            _abort(context, e)

    def HandleReloadConfigRequest(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        """``model_service_impl.cc``: a ``model_config_list`` is applied as a config file's
        reload is (``ServerCore.reload_config``); the answer's status is the reload's."""
        from tensorflow_serving.apis import model_management_pb2

        try:
            if request.config.WhichOneof("config") != "model_config_list":
                raise invalid(
                    "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                    "ModelConfigList is currently supported"
                )
            try:
                models = models_of(request.config, "ReloadConfigRequest.config")
                self.core.reload_config(models)
            except ValueError as e:  # a ConfigError: the models TF Serving would refuse
                raise invalid(str(e)) from None
        except ServingStatusError as e:
            logger.error("ReloadConfig failed: %s", e.message)
            _abort(context, e)
        return model_management_pb2.ReloadConfigResponse()


class GrpcServer:
    """A grpcio server with both services.

    Args:
        core: the models.
        host: bind address.
        port: TCP port (0: a free one, see :attr:`port`).
        max_request_bytes: larger messages are refused by gRPC (RESOURCE_EXHAUSTED).
        max_threads: concurrent RPCs (``--grpc_max_threads``).
        enforce_session_run_timeout: session runs end at the client's deadline.
    """

    def __init__(
        self,
        core: ServerCore,
        host: str,
        port: int,
        max_request_bytes: int,
        max_threads: int,
        enforce_session_run_timeout: bool = True,
    ) -> None:
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, max_threads), thread_name_prefix="grpc"
            ),
            options=[
                ("grpc.max_receive_message_length", int(max_request_bytes)),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
        )
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionService(core, enforce_session_run_timeout), self._server
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core), self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as e:  # grpcio raises on a port in use (it returned 0 before)
            self.port = 0
            reason = f": {e}"
        else:
            reason = ""
        if not self.port:
            raise OSError(f"Failed to BuildAndStart gRPC server: cannot bind {address}{reason}")
        self.host = host

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> threading.Event:
        """Refuse new RPCs; the returned event is set once those in flight are answered (at
        most ``grace`` seconds later)."""
        return self._server.stop(grace)
