"""TF Serving's answers, from the conformance table (``serving_conformance_cases.py``: each
case cites the TF Serving source or test it comes from), checked against one stand-in server
started here, over REST and gRPC where the request exists in both."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
import tensorflow as tf
from google.protobuf import json_format
from serving_conformance_cases import CASES, Rest, Sub
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc
from toy_model import save_toy_model

from keras_transformer.serving.server import start_server


def save_toy_classifier(export_dir) -> None:
    """A classify signature (``classify``: ``inputs`` serialized tf.Examples -> ``classes``
    ["a", "b"] and ``scores`` [x, 1 - x] of the float feature ``x``, default 0) and one that
    answers ``scores`` only (``scores_only``)."""
    spec = tf.TensorSpec([None], tf.string)

    def scores_of(inputs):
        features = {"x": tf.io.FixedLenFeature([], tf.float32, default_value=0.0)}
        x = tf.io.parse_example(inputs, features)["x"]
        return tf.stack([x, 1.0 - x], axis=1)

    class Classifier(tf.Module):
        @tf.function(input_signature=[spec])
        def classify(self, inputs):
            classes = tf.tile(tf.constant([["a", "b"]]), [tf.shape(inputs)[0], 1])
            return {"classes": classes, "scores": scores_of(inputs)}

        @tf.function(input_signature=[spec])
        def scores_only(self, inputs):
            return {"scores": scores_of(inputs)}

    module = Classifier()
    signatures = {
        "classify": module.classify.get_concrete_function(),
        "scores_only": module.scores_only.get_concrete_function(),
    }
    tf.saved_model.save(module, str(export_dir), signatures=signatures)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    save_toy_model(root / "staging")
    shutil.move(str(root / "staging"), str(root / "toy" / "1"))
    save_toy_classifier(root / "staging")
    shutil.move(str(root / "staging"), str(root / "cls" / "1"))
    config = root / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "toy" base_path: "{root / "toy"}" '
        'model_platform: "tensorflow" version_labels { key: "stable" value: 1 } } '
        f'config {{ name: "cls" base_path: "{root / "cls"}" model_platform: "tensorflow" }} }}'
    )
    with start_server(
        model_config_file=config,
        allow_version_labels_for_unavailable_models=True,
        port=0,
        grpc_port=0,
        poll_interval=0,
        rest_api_enable_cors_support=True,
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def stubs(server):
    channel = grpc.insecure_channel(server.grpc_target)
    yield {
        "Predict": prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict,
        "Classify": prediction_service_pb2_grpc.PredictionServiceStub(channel).Classify,
        "GetModelMetadata": prediction_service_pb2_grpc.PredictionServiceStub(
            channel
        ).GetModelMetadata,
        "GetModelStatus": model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus,
    }
    channel.close()


def http(url: str, rest: Rest) -> tuple[int, bytes, Any]:
    body = rest.body
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=body, method=rest.method, headers=dict(rest.headers))
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def check_message(got: str, expected: Any) -> None:
    if isinstance(expected, Sub):
        assert expected.text in got
    else:
        assert got == expected


@pytest.mark.parametrize("rest, rpc, cite", CASES)
def test_stand_in_answers_as_tf_serving(server, stubs, rest, rpc, cite):
    """Each case is what TF Serving answers, as ``cite`` (its source or test) says."""
    if rest is not None:
        status, data, headers = http(server.url + rest.path, rest)
        assert status == rest.status, (cite, data)
        assert [(k, headers.get(k)) for k, _ in rest.reply_headers] == list(rest.reply_headers)
        if rest.answer == b"":
            assert data == b""
        elif isinstance(rest.answer, dict):
            assert json.loads(data) == rest.answer
        else:
            answer = json.loads(data)
            assert set(answer) == {"error"}, answer
            check_message(answer["error"], rest.answer)
    if rpc is not None:
        call = stubs[rpc.method]
        if rpc.code == "OK":
            response = call(rpc.request(), timeout=30)
            assert json_format.MessageToDict(response, preserving_proto_field_name=True) == (
                rpc.answer
            )
        else:
            with pytest.raises(grpc.RpcError) as error:
                call(rpc.request(), timeout=30)
            assert error.value.code() == grpc.StatusCode[rpc.code], (cite, error.value.details())
            check_message(error.value.details(), rpc.answer)
