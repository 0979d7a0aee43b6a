"""Session-run timeouts on the stand-in, as TF Serving sets them: REST requests end after
``--rest_api_timeout_in_ms`` (``HttpRestApiHandler``), gRPC requests at the client's deadline
(``prediction_service_impl.cc``: ``DeadlineToTimeoutMillis(context->raw_deadline())`` with
``--enforce_session_run_timeout``, default true), batched ones at their batch's latest deadline
(``batching_session.cc``)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from test_serving_server import http

from keras_transformer.serving.batching_config import BatchOptions
from keras_transformer.serving.cli import build_arg_parser
from keras_transformer.serving.server import start_server

# Loop iterations of a request that runs for seconds on any CPU (0.6 s per 100k here) and
# well past the REST timeout below.
LONG = 500_000
REST_TIMEOUT_MS = 100


def save_spin_model(path) -> str:
    """`spin`: ``n`` (int64 [N]) -> ``value`` after a loop of ``max(n)`` steps, one per row."""

    class Spin(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="n")])
        def spin(self, n):
            def body(i, value):
                return i + 1, value * 0.5 + 1.0

            _, value = tf.while_loop(
                lambda i, value: i < tf.reduce_max(n),
                body,
                (tf.constant(0, tf.int64), tf.constant(0.0)),
            )
            return {"value": tf.fill(tf.shape(n), value)}

    module = Spin()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.spin})
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    base = tmp_path_factory.mktemp("spin") / "spin"
    save_spin_model(base / "1")
    return base


def grpc_predict(srv, n: int, timeout: float):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "spin"
    request.inputs["n"].CopyFrom(tf.make_tensor_proto(np.array([n], np.int64)))
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(srv.grpc_target))
    return stub.Predict(request, timeout=timeout)


@pytest.mark.parametrize("batching", [None, BatchOptions(max_batch_size=8)])
def test_rest_timeout_applies_to_rest_and_grpc_uses_the_clients_deadline(base, batching):
    with start_server(
        base,
        "spin",
        port=0,
        grpc_port=0,
        poll_interval=0,
        rest_api_timeout_ms=REST_TIMEOUT_MS,
        enable_batching=batching is not None,
        batching_parameters=batching,
    ) as srv:
        url = f"{srv.url}/v1/models/spin:predict"
        assert http(url, "POST", {"instances": [3]}) == (200, {"predictions": [1.75]})
        status, body = http(url, "POST", {"instances": [LONG]})
        assert status == 504, body  # DEADLINE_EXCEEDED
        assert "Timed out" in body["error"] or "timeout" in body["error"].lower()
        # The same request over gRPC runs to the end: the REST flag is REST's alone.
        reply = grpc_predict(srv, LONG, timeout=120)
        assert tf.make_ndarray(reply.outputs["value"]).tolist() == [2.0]
        # A short client deadline ends it: DEADLINE_EXCEEDED, and the server keeps answering.
        with pytest.raises(grpc.RpcError) as error:
            grpc_predict(srv, 20 * LONG, timeout=0.3)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert tf.make_ndarray(grpc_predict(srv, 3, timeout=30).outputs["value"]).tolist() == [1.75]


@pytest.mark.parametrize(
    "flag, expected",
    [
        ([], True),
        (["--enforce_session_run_timeout=false"], False),
        (["--enforce_session_run_timeout"], True),
    ],
)
def test_enforce_session_run_timeout_parses_like_tf_serving(flag, expected):
    assert build_arg_parser().parse_args(flag).enforce_session_run_timeout is expected
