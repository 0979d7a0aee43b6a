"""TF Serving's Classify API on the classifier export: a tiny classification run trained and
exported here, served by the stand-in (started here) over REST (`:classify`) and gRPC
(`PredictionService.Classify`), against its `serving_default` and TF Serving's messages
(`classifier.cc`, `json_tensor.cc`)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from task_configs import RECIPES, TINY_TRAINING
from tensorflow_serving.apis import (
    classification_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from keras_transformer.compat import write_saved_model_fingerprint
from keras_transformer.config import load_config
from keras_transformer.export import export_run
from keras_transformer.runner import train
from keras_transformer.serving.classifier import classification_result
from keras_transformer.serving.classify_codec import example_from_json
from keras_transformer.serving.client import ServingClient, ServingError
from keras_transformer.serving.errors import ServingStatusError
from keras_transformer.serving.servable import SessionOptions
from keras_transformer.serving.server import start_server
from keras_transformer.tasks.classification import (
    CLASSIFY_SIGNATURE,
    EXAMPLE_TEXT_FEATURE,
    text_example,
)

TEXTS = ["they watch the film .", "The old dog was not good!", ""]
NAME = "classifier"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    overrides = [
        f"training.run_dir={root / 'run'}",
        f"data.data_dir={root / 'tfds'}",
        "data.download=false",  # offline: the recipe falls back to its generated set
        "data.max_train_examples=200",
        "data.max_validation_examples=16",
        "data.vocab_size=300",
        "data.batch_size=16",
        "classification.max_length=32",
        "model.num_encoder_layers=1",
        *TINY_TRAINING,
    ]
    run_dir = train(load_config(RECIPES["classification"], overrides)).paths.root
    return export_run(run_dir, str(root / "exports"))


@pytest.fixture(scope="module")
def server(export):
    with start_server(os.path.dirname(export), NAME, poll_interval=0) as srv:
        yield srv


@pytest.fixture(scope="module")
def checking_server(export):
    """A server with `--enable_signature_method_name_check`."""
    options = SessionOptions(signature_method_name_check=True)
    base = os.path.dirname(export)
    with start_server(base, NAME, poll_interval=0, session_options=options) as srv:
        yield srv


def post(srv, body, verb="classify"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"{srv.url}/v1/models/{NAME}:{verb}", data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def grpc_classify(srv, examples, signature=CLASSIFY_SIGNATURE, context=None):
    """A ClassificationRequest as a TF Serving client writes it; the response or the error."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = NAME
    request.model_spec.signature_name = signature
    if context is not None:
        listed = request.input.example_list_with_context
        listed.context.CopyFrom(tf.train.Example.FromString(context))
    else:
        listed = request.input.example_list
    for serialized in examples:
        listed.examples.add().CopyFrom(tf.train.Example.FromString(serialized))
    with grpc.insecure_channel(srv.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            return stub.Classify(request, timeout=60)
        except grpc.RpcError as e:
            return e


def test_export_adds_a_classify_signature_and_keeps_serving_default(export, server, tmp_path):
    signatures = ServingClient(server.url, NAME).metadata()["metadata"]["signature_def"]
    signatures = signatures["signature_def"]
    assert set(signatures) - {"__saved_model_init_op"} == {"serving_default", CLASSIFY_SIGNATURE}
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert set(default["inputs"]) == {"sentences"}
    assert set(default["outputs"]) == {"labels", "probabilities"}
    classify = signatures[CLASSIFY_SIGNATURE]
    assert classify["method_name"] == "tensorflow/serving/classify"
    assert classify["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert {k: v["dtype"] for k, v in classify["outputs"].items()} == {
        "classes": "DT_STRING",
        "scores": "DT_FLOAT",
    }
    with open(f"{export}/assets.extra/export_info.json") as f:
        info = json.load(f)
    assert info["signatures"] == ["serving_default", CLASSIFY_SIGNATURE]
    assert info["example_text_feature"] == EXAMPLE_TEXT_FEATURE
    num_classes = len(info["labels"])
    dims = [int(d["size"]) for d in classify["outputs"]["scores"]["tensor_shape"]["dim"]]
    assert dims == [-1, num_classes]
    # fingerprint.pb was rewritten after the method name changed: its checksums are those of
    # a fresh one (stale ones would differ in saved_model_checksum and signature_def_hash).
    fresh = str(shutil.copytree(export, tmp_path / "copy"))
    write_saved_model_fingerprint(fresh)
    read = tf.saved_model.experimental.read_fingerprint
    fields = ["saved_model_checksum", "signature_def_hash", "graph_def_program_hash"]
    assert [getattr(read(export), f) for f in fields] == [getattr(read(fresh), f) for f in fields]


def test_classify_over_rest_and_grpc_answers_as_serving_default(export, server):
    with open(f"{export}/assets.extra/export_info.json") as f:
        labels = json.load(f)["labels"]
    predictions = ServingClient(server.url, NAME).predict(TEXTS)
    examples = [{EXAMPLE_TEXT_FEATURE: text} for text in TEXTS]
    for url in (server.url, f"grpc://{server.grpc_target}"):
        client = ServingClient(url, NAME)
        results = client.classify(examples, signature_name=CLASSIFY_SIGNATURE)
        client.close()
        assert len(results) == len(TEXTS), url
        for row, prediction in zip(results, predictions):
            assert [label for label, _ in row] == labels, url
            scores = [score for _, score in row]
            assert scores == prediction["probabilities"], url  # the same float32 values
            assert labels[int(np.argmax(scores))] == prediction["labels"], url
    # The raw gRPC answer: classes and scores, and the model spec as TF Serving fills it in.
    response = grpc_classify(server, [text_example(t) for t in TEXTS])
    assert response.model_spec.name == NAME and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == CLASSIFY_SIGNATURE
    first = response.result.classifications[0].classes
    assert [c.label for c in first] == labels
    np.testing.assert_allclose([c.score for c in first], predictions[0]["probabilities"])


def assert_same_rows(got, want):
    """The same labels, the same scores up to float32 rounding (batches of other sizes)."""
    assert [[label for label, _ in row] for row in got] == [
        [label for label, _ in row] for row in want
    ]
    scores = [[score for _, score in row] for row in got]
    np.testing.assert_allclose(scores, [[score for _, score in row] for row in want], rtol=1e-5)


def test_context_is_merged_into_each_example_and_bytes_are_b64(server):
    alone = post(
        server,
        {"signature_name": CLASSIFY_SIGNATURE, "examples": [{"sentence": t} for t in TEXTS[:2]]},
    )
    assert alone[0] == 200, alone
    encoded = {"b64": base64.b64encode(TEXTS[0].encode()).decode()}
    body = {
        "signature_name": CLASSIFY_SIGNATURE,
        "context": {EXAMPLE_TEXT_FEATURE: TEXTS[0], "unused": [1, 2]},
        # The first takes the context's text; the second's own text wins over it.
        "examples": [{}, {EXAMPLE_TEXT_FEATURE: TEXTS[1]}, {EXAMPLE_TEXT_FEATURE: encoded}],
    }
    status, answer = post(server, body)
    assert status == 200, answer
    assert_same_rows(answer["results"], [*alone[1]["results"], alone[1]["results"][0]])
    response = grpc_classify(server, [b"", text_example(TEXTS[1])], context=text_example(TEXTS[0]))
    scores = [[c.score for c in r.classes] for r in response.result.classifications]
    expected = [[s for _, s in row] for row in alone[1]["results"]]
    np.testing.assert_allclose(scores, expected, rtol=1e-5)
    client = ServingClient(server.url, NAME)  # bytes values go as {"b64": ...}
    rows = client.classify([{EXAMPLE_TEXT_FEATURE: TEXTS[0].encode()}], CLASSIFY_SIGNATURE)
    assert_same_rows(rows, alone[1]["results"][:1])


PREDICT_SIGNATURE_REFUSED = "No classification inputs found in SignatureDef: inputs {"
METHOD_REFUSED = (
    "Expected classification signature method_name to be tensorflow/serving/classify. "
    "Was: tensorflow/serving/predict"
)
MISSING_FEATURE = "Feature: sentence (data type: string) is required but could not be found."


def test_a_signature_that_is_not_for_classify_is_refused(server, checking_server):
    examples = [{EXAMPLE_TEXT_FEATURE: "a film"}]
    # TF Serving's default: the signature's shape is checked (serving_default has no `inputs`).
    status, answer = post(server, {"examples": examples})
    assert status == 400 and answer["error"].startswith(PREDICT_SIGNATURE_REFUSED), answer
    assert 'method_name: "tensorflow/serving/predict"' in answer["error"]
    error = grpc_classify(server, [text_example("a film")], signature="")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(PREDICT_SIGNATURE_REFUSED)
    # --enable_signature_method_name_check: the method name, before the shape.
    status, answer = post(checking_server, {"examples": examples})
    assert (status, answer) == (400, {"error": METHOD_REFUSED})
    error = grpc_classify(checking_server, [text_example("a film")], signature="serving_default")
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, METHOD_REFUSED)
    # ... which lets Predict run both (predict_util.cc's VerifySignature), and Classify the
    # classify signature.
    assert len(ServingClient(checking_server.url, NAME).predict(["a film"])) == 1
    rows = ServingClient(checking_server.url, NAME).classify(examples, CLASSIFY_SIGNATURE)
    assert len(rows) == 1
    status, answer = post(server, {"signature_name": "nope", "examples": examples})
    assert (status, answer) == (400, {"error": "No signature was found with the name: nope"})


def _body(**fields):
    return {"signature_name": CLASSIFY_SIGNATURE, **fields}


MALFORMED = {
    "not_json": (b'{"examples": [', "JSON Parse error"),
    "not_an_object": ([1], "JSON Value: [1] Is not object"),
    "no_examples": (
        _body(),
        "When method is classify, key 'examples' is expected and was not found",
    ),
    "examples_not_a_list": (_body(examples={}), "Expecting 'examples' value to be an list/array"),
    "no_example": (_body(examples=[]), "'examples' value is an empty array"),
    "example_not_an_object": (
        _body(examples=["a"]),
        "Example must be JSON object but got JSON String",
    ),
    "context_not_an_object": (
        _body(context=[1], examples=[{}]),
        "Example must be JSON object but got JSON Array",
    ),
    "mixed_kinds": (
        _body(examples=[{"sentence": ["a", 1]}]),
        "Unexpected element type in feature: sentence expecting type: bytes",
    ),
    "null": (
        _body(examples=[{"sentence": None}]),
        "Feature: sentence has element with unexpected JSON type: Null",
    ),
    "nested_list": (
        _body(examples=[{"sentence": [["a"]]}]),
        "Feature: sentence has element with unexpected JSON type: Array",
    ),
    "uint64": (
        _body(examples=[{"n": 2**63}]),
        "Feature: n has uint64_t element. Only int64_t is supported.",
    ),
    "bad_b64": (_body(examples=[{"sentence": {"b64": "%%"}}]), "Unable to base64 decode"),
    "signature_name_not_a_string": (
        {"signature_name": 1, "examples": [{}]},
        "'signature_name' key must be a string value.",
    ),
    "missing_feature": (_body(examples=[{"text": "a film"}]), MISSING_FEATURE),
    "feature_of_another_kind": (
        _body(examples=[{"sentence": 3}]),
        "Key: sentence, Index: 0.  Data types don't match. Data type: int64 but expected type: "
        "string",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_classify_bodies_get_tf_servings_errors(server, case):
    body, fragment = MALFORMED[case]
    status, answer = post(server, body)
    assert status == 400, answer
    assert set(answer) == {"error"} and fragment in answer["error"], answer


def test_grpc_errors(server):
    error = grpc_classify(server, [tf.train.Example().SerializeToString()])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and MISSING_FEATURE in error.details()
    error = grpc_classify(server, [])
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "Input is empty.")
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Classify(classification_pb2.ClassificationRequest(), timeout=60)
        assert caught.value.details() == "Missing ModelSpec"
        request = regression_pb2.RegressionRequest()
        request.model_spec.name = NAME
        with pytest.raises(grpc.RpcError) as caught:
            stub.Regress(request, timeout=60)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(ServingError) as caught:  # the client's error over gRPC
        ServingClient(f"grpc://{server.grpc_target}", NAME).classify(
            [{"text": "x"}], "classification"
        )
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.status_code == 400
    status, answer = post(server, {"examples": [{}]}, verb="regress")
    assert status == 501 and "regress" in answer["error"]


def test_json_values_map_to_feature_kinds():
    example = tf.train.Example()
    example_from_json(
        {"s": "é", "b": {"b64": "eHk="}, "i": [1, -2], "t": True, "f": [1.5, 2e3], "e": []},
        example,
    )
    features = example.features.feature
    assert features["s"].bytes_list.value == ["é".encode()]
    assert features["b"].bytes_list.value == [b"xy"]
    assert features["i"].int64_list.value == [1, -2]
    assert features["t"].int64_list.value == [1]
    assert features["f"].float_list.value == [1.5, 2000.0]
    assert features["e"].WhichOneof("kind") is None


OUTPUT_ERRORS = {
    "classes_rank": (
        {"classes": np.array([b"a", b"b"], object)},
        "Expected Tensor shape: [batch_size num_classes] but got [2]",
    ),
    "classes_dtype": (
        {"classes": np.zeros((2, 2), np.float32)},
        "Expected classes Tensor of DT_STRING. Got: DT_FLOAT",
    ),
    "scores_dtype": (
        {"scores": np.zeros((2, 2), np.float64)},
        "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE",
    ),
    "scores_batch": (
        {"scores": np.zeros((3, 2), np.float32)},
        "Expected scores output batch size of 2. Got: 3",
    ),
    "mismatch": (
        {"classes": np.full((2, 3), b"a", object), "scores": np.zeros((2, 2), np.float32)},
        "Tensors class and score should match in dim_size(1). Got 3 vs. 2",
    ),
}


@pytest.mark.parametrize("case", sorted(OUTPUT_ERRORS))
def test_unfit_outputs_are_refused_as_tf_serving_does(case):
    outputs, message = OUTPUT_ERRORS[case]
    with pytest.raises(ServingStatusError) as caught:
        classification_result(outputs, num_examples=2)
    assert (caught.value.code, caught.value.message) == ("INVALID_ARGUMENT", message)


def test_scores_only_leave_labels_empty():
    result = classification_result({"scores": np.array([[0.25, 0.75]], np.float32)}, 1)
    assert [(c.label, c.score) for c in result.classifications[0].classes] == [
        ("", 0.25),
        ("", 0.75),
    ]
