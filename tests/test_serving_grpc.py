"""The stand-in's gRPC API, driven by a client written for TF Serving (the generated stubs of
tensorflow-serving-api), next to REST on the same server."""

from __future__ import annotations

import base64
import json
import shutil
import urllib.error
import urllib.request

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from toy_model import save_toy_model

from keras_transformer.serving.client import ServingClient, ServingError
from keras_transformer.serving.server import start_server

MAX_BYTES = 64 * 1024
MAX_BATCH = 32


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc")
    save_toy_model(root / "toy" / "1", prefix="v1:")
    save_toy_model(root / "staging", prefix="v2:")
    shutil.move(str(root / "staging"), str(root / "toy" / "2"))
    config = root / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "toy" base_path: "{root / "toy"}" '
        'model_platform: "tensorflow" model_version_policy { all {} } '
        'version_labels { key: "stable" value: 1 } version_labels { key: "canary" value: 2 } } }'
    )
    with start_server(
        model_config_file=config,
        allow_version_labels_for_unavailable_models=True,
        port=0,
        grpc_port=0,
        poll_interval=0,
        max_request_bytes=MAX_BYTES,
        max_request_batch_size=MAX_BATCH,
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def stubs(server):
    channel = grpc.insecure_channel(server.grpc_target)
    yield (
        prediction_service_pb2_grpc.PredictionServiceStub(channel),
        model_service_pb2_grpc.ModelServiceStub(channel),
    )
    channel.close()


def predict_request(strings, signature="", version=None, label=None, name="toy", **inputs):
    """A PredictRequest as a TF Serving client writes it."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    if strings is not None:
        request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(strings, dtype=tf.string))
    for alias, value in inputs.items():
        request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
    return request


def rest(server, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def assert_grpc_healthy(stubs):
    response = stubs[0].Predict(predict_request(["ok"]), timeout=30)
    assert list(response.outputs["translations"].string_val) == [b"v2:OK"]


def test_predict_as_a_tf_serving_client_writes_it(stubs):
    request = predict_request(["ab", "grüße"], signature="serving_default")
    response = stubs[0].Predict(request, timeout=30)
    assert response.model_spec.name == "toy"
    assert response.model_spec.version.value == 2
    assert response.model_spec.signature_name == "serving_default"
    # Typed value fields, as TF Serving writes them (not tensor_content).
    translations = response.outputs["translations"]
    assert translations.dtype == tf.string.as_datatype_enum
    assert [d.size for d in translations.tensor_shape.dim] == [2]
    assert [s.decode() for s in translations.string_val] == ["v2:AB", "v2:GRüßE"]
    assert list(response.outputs["scores"].float_val) == pytest.approx([0.2, 0.5])


@pytest.mark.parametrize(
    "spec, expected",
    [({"version": 1}, "v1:A"), ({"label": "stable"}, "v1:A"), ({"label": "canary"}, "v2:A")],
)
def test_versions_and_labels(stubs, spec, expected):
    response = stubs[0].Predict(predict_request(["a"], **spec), timeout=30)
    assert response.outputs["translations"].string_val == [expected.encode()]
    assert response.model_spec.version.value == int(expected[1])


@pytest.mark.parametrize("signature", ["serving_default", "tokenize"])
def test_rest_and_grpc_answer_the_same(server, stubs, signature):
    sentences = ["ab", "", "xyz"]
    status, body = rest(
        server, "/v1/models/toy:predict", {"signature_name": signature, "inputs": sentences}
    )
    assert status == 200, body
    response = stubs[0].Predict(predict_request(sentences, signature=signature), timeout=30)
    grpc_outputs = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
    for alias, value in body["outputs"].items():
        got = grpc_outputs[alias]
        if isinstance(got[0], bytes):
            got = [g.decode() for g in got]
        assert got == pytest.approx(value) if alias == "scores" else got == value


def test_output_filter_and_two_inputs(stubs):
    request = predict_request(None, signature="pair", a=[b"x"], b=[b"\xff"])
    response = stubs[0].Predict(request, timeout=30)
    assert response.outputs["joined_bytes"].string_val == [b"x|\xff"]
    request = predict_request(["ab"])
    request.output_filter.append("scores")
    assert set(stubs[0].Predict(request, timeout=30).outputs) == {"scores"}


def test_metadata_and_status(stubs):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "toy"
    request.model_spec.version.value = 1
    request.metadata_field.append("signature_def")
    response = stubs[0].GetModelMetadata(request, timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value) == ("toy", 1)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    assert {"serving_default", "tokenize", "pair"} <= set(signature_map.signature_def)
    inputs = signature_map.signature_def["serving_default"].inputs
    assert inputs["sentences"].dtype == tf.string.as_datatype_enum

    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "toy"
    response = stubs[1].GetModelStatus(request, timeout=30)
    states = [(s.version, s.state, s.status.error_code) for s in response.model_version_status]
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert states == [(2, available, 0), (1, available, 0)]


def _oversized():
    return predict_request(["x" * MAX_BYTES])


def _scalar():
    request = predict_request(None)
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto("scalar"))
    return request


# What the conformance table (serving_conformance_cases.py) does not hold, over gRPC: the
# stand-in's own limits and errors the graph raises: (request, status code, message fragment).
BAD_PREDICTS = {
    "wrong_rank": (_scalar, "INVALID_ARGUMENT", "shape"),
    "invalid_utf8": (
        lambda: predict_request([b"\xff\xfe"]),
        "INVALID_ARGUMENT",
        "input string",
    ),
    "batch_over_limit": (
        lambda: predict_request(["a"] * (MAX_BATCH + 1)),
        "INVALID_ARGUMENT",
        "exceeds the limit of 32",
    ),
    "oversized_message": (_oversized, "RESOURCE_EXHAUSTED", "larger than max"),
}


@pytest.mark.parametrize("case", sorted(BAD_PREDICTS))
def test_bad_predict_gets_tf_servings_code_and_server_keeps_answering(stubs, case):
    make, code, fragment = BAD_PREDICTS[case]
    with pytest.raises(grpc.RpcError) as error:
        stubs[0].Predict(make(), timeout=30)
    assert error.value.code() == grpc.StatusCode[code], error.value.details()
    assert fragment in error.value.details()
    assert "Traceback" not in error.value.details()
    assert_grpc_healthy(stubs)


def test_the_package_client_speaks_both(server):
    for url in (server.url, f"grpc://{server.grpc_target}"):
        client = ServingClient(url, "toy", label="stable")
        assert client.predict(["ab", ""]) == [
            {"scores": 0.2, "translations": "v1:AB"},
            {"scores": 0.0, "translations": "v1:"},
        ]
        assert client.predict(["ab"], columnar=True) == {
            "scores": [0.2],
            "translations": ["v1:AB"],
        }
        pair = client.predict([{"a": b"x", "b": "y"}], signature_name="pair")
        assert pair == [{"b64": base64.b64encode(b"x|y").decode()}]
        tokens = client.predict({"sentences": ["ab"]}, signature_name="tokenize", columnar=True)
        assert tokens == {"lengths": [2], "token_ids": [[97, 98]]}
        # Python ints go as the signature's int32 (REST reads JSON numbers so), and an empty
        # list as an empty tensor of its type: int64 and float64 before, refused over gRPC.
        text = client.predict([[104, 105]], signature_name="detokenize")
        assert text == [{"sentences": "hi", "widths": 2}]
        assert client.predict({"sentences": []}, columnar=True) == {
            "scores": [],
            "translations": [],
        }
        # By label, every version (TF Serving's GetModelStatus reads only the version).
        assert [v["version"] for v in client.status()["model_version_status"]] == ["2", "1"]
        assert client.metadata()["model_spec"]["version"] == "1"
        with pytest.raises(ServingError) as error:
            client.predict([1, 2])
        assert error.value.status_code == 400
        with pytest.raises(ServingError) as error:
            ServingClient(url, "nope").predict(["a"])
        assert error.value.status_code == 404 and "nope" in error.value.message


def test_grpc_client_on_a_closed_port_raises_unavailable():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ServingClient(f"grpc://127.0.0.1:{port}", "toy", timeout=5, retries=2, backoff=0.01)
    with pytest.raises(ServingError) as error:
        client.predict(["a"])
    assert error.value.code == "UNAVAILABLE"
