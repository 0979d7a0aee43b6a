"""The conformance table of test_serving_conformance.py: requests, and the status and body
(REST) or code and details (gRPC) that TF Serving gives for them, each citing the TF Serving
source or test it comes from (test code, not part of the installed package). Paths are TF
Serving's ``tensorflow_serving/...``; the models are the toy SavedModel (``toy``, version 1
under the label ``stable``) and the test module's toy classifier (``cls``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)

HANDLER = "model_servers/http_rest_api_handler.cc"
HANDLER_TEST = "model_servers/http_rest_api_handler_test.cc"
UTIL = "model_servers/http_rest_api_util.cc"
JSON = "util/json_tensor.cc"
JSON_TEST = "util/json_tensor_test.cc"
PREDICT_UTIL = "servables/tensorflow/predict_util.cc"
STATUS_IMPL = "model_servers/get_model_status_impl.cc"
METADATA_IMPL = "servables/tensorflow/get_model_metadata_impl.cc"
SERVER_CORE = "model_servers/server_core.cc ServableRequestFromModelSpec"
BASIC_MANAGER = "core/basic_manager.cc GetUntypedServableHandle"
CLASSIFIER_TEST = "servables/tensorflow/classifier_test.cc"


@dataclasses.dataclass(frozen=True)
class Sub:
    """An error message TF Serving builds from more than fixed text: a part of it."""

    text: str


@dataclasses.dataclass(frozen=True)
class Rest:
    method: str
    path: str
    body: Any  # JSON-encoded unless bytes or None
    status: int
    answer: Any  # a dict (the body), a str / Sub (the "error"), or b"" (an empty body)
    headers: tuple[tuple[str, str], ...] = ()  # the request's
    reply_headers: tuple[tuple[str, str], ...] = ()  # some of the answer's


@dataclasses.dataclass(frozen=True)
class Rpc:
    method: str  # "Predict", "Classify", "GetModelMetadata", "GetModelStatus"
    request: Callable[[], Any]
    code: str  # grpc.StatusCode name
    answer: Any  # the details (str / Sub), or the response as a dict when OK


def case(name: str, cite: str, rest: Rest | None = None, rpc: Rpc | None = None):
    return pytest.param(rest, rpc, cite, id=name)


def predict(signature="", version=None, label=None, name="toy", filters=(), **inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    for alias, value in inputs.items():
        request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
    request.output_filter.extend(filters)
    return request


def status(name="toy", version=None, label=None):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = name
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    return request


def metadata(*fields, name="toy"):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = name
    request.metadata_field.extend(fields)
    return request


def classify(signature="", name="toy", xs=(None,)):
    """A ClassificationRequest with an example per entry of ``xs`` (its float feature ``x``,
    or none for None)."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    for x in xs:
        example = request.input.example_list.examples.add()
        if x is not None:
            example.features.feature["x"].float_list.value.append(x)
    return request


def without_spec(make):
    def build():
        request = make()
        request.ClearField("model_spec")
        return request

    return build


def malformed_tensor(signature=""):
    request = predict(signature)
    request.inputs["sentences"].tensor_shape.dim.add(size=1)
    request.inputs["sentences"].string_val.append(b"a")  # dtype DT_INVALID
    return request


def pretty(value) -> str:
    """How TF Serving quotes a JSON value in a message (``JsonValueToDebugString``)."""
    import rapidjson

    return rapidjson.dumps(
        value, indent=4, write_mode=rapidjson.WM_SINGLE_LINE_ARRAY, ensure_ascii=False
    )


P = "/v1/models/toy:predict"
C = "/v1/models/cls:classify"
# AddCORSHeaders (http_rest_api_util.cc), on every answer with --rest_api_enable_cors_support.
CORS = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Methods", "POST, GET"),
    ("Access-Control-Allow-Headers", "Content-Type"),
)
AB = {"predictions": [{"scores": 0.2, "translations": "AB"}]}
AB_GRPC = {
    "model_spec": {"name": "toy", "version": "1", "signature_name": "serving_default"},
    "outputs": {
        "scores": {
            "dtype": "DT_FLOAT",
            "tensor_shape": {"dim": [{"size": "1"}]},
            "float_val": [0.2],
        },
        "translations": {
            "dtype": "DT_STRING",
            "tensor_shape": {"dim": [{"size": "1"}]},
            "string_val": ["QUI="],  # b"AB" as proto JSON writes bytes
        },
    },
}
STATUS_GRPC = {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {}}]}
STATUS = {
    "model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
}
CLASSIFIED = {
    "model_spec": {"name": "cls", "version": "1", "signature_name": "classify"},
    "result": {
        "classifications": [
            {"classes": [{"label": "a", "score": 0.25}, {"label": "b", "score": 0.75}]},
            {"classes": [{"label": "a"}, {"label": "b", "score": 1.0}]},  # 0: a default, unprinted
        ]
    },
}
PAIR_OBJECTS = "instances is a plain list, but expecting list of objects as multiple input tensors"
ELEMENT = "Failed to process element: {} of 'instances' list. Error: INVALID_ARGUMENT: {}"
SIZE = "input size does not match signature: {}!={} len({{{}}}) != len({{{}}}). Sent extra: {{{}}}. Missing but required: {{{}}}."

CASES = [
    # --- paths and methods (http_rest_api_util.cc's regexes, ParseModelInfo) ----------------
    case("predict_row", f"{HANDLER_TEST} Predict", Rest("POST", P, {"instances": ["ab"]}, 200, AB),
         Rpc("Predict", lambda: predict(sentences=[b"ab"]), "OK", AB_GRPC)),
    case("predict_columnar", f"{HANDLER_TEST} Predict (columnar inputs)",
         Rest("POST", P, {"inputs": ["ab"]}, 200, {"outputs": {"scores": [0.2], "translations": ["AB"]}})),
    case("named_single_input_columnar", f"{JSON} FillTensorMapFromInputsMap",
         Rest("POST", P, {"inputs": {"sentences": ["ab"]}}, 200, {"outputs": {"scores": [0.2], "translations": ["AB"]}})),
    case("case_insensitive_route", f"{UTIL} kPredictionApiGegex (?i)",
         Rest("POST", "/V1/MODELS/toy/VERSIONS/1:PREDICT", {"instances": ["ab"]}, 200, AB)),
    case("label_route", f"{HANDLER_TEST} Predict (version label)",
         Rest("POST", "/v1/models/toy/labels/stable:predict", {"instances": ["ab"]}, 200, AB),
         Rpc("Predict", lambda: predict(label="stable", sentences=[b"ab"]), "OK", AB_GRPC)),
    case("percent_encoded_name", f"{UTIL} ParseModelInfo (DecodeArg: curl_easy_unescape)",
         Rest("POST", "/v1/models/t%6Fy:predict", {"instances": ["ab"]}, 200, AB)),
    case("query_string_ignored", "model_servers/http_server.cc (the handler gets uri_path())",
         Rest("GET", "/v1/models/toy?verbose=1", None, 200, STATUS)),
    case("trailing_slash", f"{UTIL} kModelStatusApiRegex (a full match)",
         Rest("GET", "/v1/models/toy/", None, 400, "Malformed request: GET /v1/models/toy/")),
    case("unknown_verb", f"{UTIL} kPredictionApiGegex (classify|regress|predict)",
         Rest("POST", "/v1/models/toy:explain", {}, 400, "Malformed request: POST /v1/models/toy:explain")),
    case("version_and_label", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("POST", "/v1/models/toy/versions/1/labels/stable:predict", {"instances": ["ab"]}, 400,
              "Malformed request: POST /v1/models/toy/versions/1/labels/stable:predict")),
    case("version_not_a_number", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("POST", "/v1/models/toy/versions/HELLO:predict", {}, 400,
              "Malformed request: POST /v1/models/toy/versions/HELLO:predict")),
    case("version_beyond_int64", f"{HANDLER_TEST} UnsupportedApiCalls; {UTIL} ParseModelInfo returns before MakeJsonFromStatus",
         Rest("POST", "/v1/models/toy/versions/18446744073709551615:predict", {}, 400, b"")),
    case("get_on_predict", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("GET", P, None, 400, f"Malformed request: GET {P}")),
    case("post_on_metadata", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("POST", "/v1/models/toy/metadata", {}, 400, "Malformed request: POST /v1/models/toy/metadata")),
    case("post_on_models", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("POST", "/v1/models", {}, 400, "Malformed request: POST /v1/models")),
    case("unknown_v1_path", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("GET", "/v1/models/debug/model_name", None, 400, "Malformed request: GET /v1/models/debug/model_name")),
    case("put", f"{HANDLER} ProcessRequest (POST and GET only)",
         Rest("PUT", P, {}, 400, f"Malformed request: PUT {P}")),
    case("missing_model_name", f"{HANDLER_TEST} UnsupportedApiCalls",
         Rest("GET", "/v1/models", None, 400, "Missing model name in request.")),
    case("cors_preflight", "model_servers/http_server.cc RestApiRequestDispatcher::ProcessRequest",
         Rest("OPTIONS", P, None, 200, b"", (("Origin", "http://example.com"),), CORS)),
    case("cors_preflight_without_origin", "model_servers/http_server.cc RestApiRequestDispatcher::ProcessRequest",
         Rest("OPTIONS", P, None, 400, b"")),
    # --- model, version and label ------------------------------------------------------------
    case("unknown_model", f"{HANDLER_TEST} PredictModelNameVersionErrors; {BASIC_MANAGER}",
         Rest("POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404, "Servable not found for request: Latest(nope)"),
         Rpc("Predict", lambda: predict(name="nope", sentences=[b"a"]), "NOT_FOUND", "Servable not found for request: Latest(nope)")),
    case("unknown_version", f"{HANDLER_TEST} PredictModelNameVersionErrors; {BASIC_MANAGER}",
         Rest("POST", "/v1/models/toy/versions/7:predict", {"instances": ["a"]}, 404, "Servable not found for request: Specific(toy, 7)"),
         Rpc("Predict", lambda: predict(version=7, sentences=[b"a"]), "NOT_FOUND", "Servable not found for request: Specific(toy, 7)")),
    case("unknown_label", f"{HANDLER_TEST} PredictRequestErrors; server_core.cc GetModelVersionForLabel",
         Rest("POST", "/v1/models/toy/labels/beta:predict", {"instances": ["a"]}, 400, "Unrecognized servable version label: beta"),
         Rpc("Predict", lambda: predict(label="beta", sentences=[b"a"]), "INVALID_ARGUMENT", "Unrecognized servable version label: beta")),
    case("label_of_unknown_model", SERVER_CORE,
         Rest("POST", "/v1/models/nope/labels/stable:predict", {"instances": ["a"]}, 400, "Unrecognized servable version label: stable"),
         Rpc("Predict", lambda: predict(name="nope", label="stable", sentences=[b"a"]), "INVALID_ARGUMENT", "Unrecognized servable version label: stable")),
    case("no_model_spec", "servables/tensorflow/predict_impl.cc TensorflowPredictor::Predict",
         rpc=Rpc("Predict", without_spec(predict), "INVALID_ARGUMENT", "Missing ModelSpec")),
    case("empty_model_name", SERVER_CORE,
         rpc=Rpc("Predict", lambda: predict(name="", sentences=[b"a"]), "INVALID_ARGUMENT", "ModelSpec has no name specified.")),
    # --- JSON parsing (json_tensor.cc ParseJson: rapidjson, kParseStopWhenDoneFlag) ------------
    case("empty_body", f"{HANDLER_TEST} PredictRequestErrors",
         Rest("POST", P, b"", 400, "JSON Parse error: The document is empty")),
    case("blank_body", f"{JSON} ParseJson (only an empty body is checked before rapidjson)",
         Rest("POST", P, b"  ", 400, "JSON Parse error: The document is empty. at offset: 2")),
    case("not_json", f"{HANDLER_TEST} PredictRequestErrors",
         Rest("POST", P, b"instances = [1, 2]", 400, "JSON Parse error: Invalid value. at offset: 0")),
    case("truncated_json", f"{JSON} ParseJson (rapidjson's GetParseError_En)",
         Rest("POST", P, b'{"instances": ["a"', 400, "JSON Parse error: Missing a comma or ']' after an array element. at offset: 18")),
    case("text_after_the_document", f"{JSON} ParseJson (kParseStopWhenDoneFlag)",
         Rest("POST", P, b'{"instances": ["ab"]} and more', 200, AB)),
    case("not_an_object", f"{JSON} ParseJson",
         Rest("POST", P, [1, 2], 400, "JSON Value: [1, 2] Is not object")),
    case("signature_name_not_a_string", f"{HANDLER_TEST} PredictRequestErrors; {JSON} FormatSignatureError",
         Rest("POST", P, {"signature_name": 100}, 400,
              f"JSON Value: {pretty({'signature_name': 100})} not formatted correctly. 'signature_name' key must be a string value.")),
    # --- signatures ------------------------------------------------------------------------------
    case("unknown_signature", f"{HANDLER} GetInfoMap; {PREDICT_UTIL} RunPredict",
         Rest("POST", P, {"signature_name": "nope", "inputs": ["a"]}, 400, 'Serving signature name: "nope" not found in signature def'),
         Rpc("Predict", lambda: predict("nope", sentences=[b"a"]), "FAILED_PRECONDITION", 'Serving signature key "nope" not found.')),
    case("signature_without_inputs", f"{JSON} FillPredictRequestFromJson",
         Rest("POST", P, {"signature_name": "__saved_model_init_op", "inputs": ["a"]}, 400,
              "Failed to get input map for signature: __saved_model_init_op")),
    # --- instances / inputs (json_tensor.cc) ----------------------------------------------------
    case("both_instances_and_inputs", f"{JSON_TEST}; {JSON} FillPredictRequestFromJson",
         Rest("POST", P, {"instances": ["a"], "inputs": ["a"]}, 400,
              f"JSON Value: {pretty({'instances': ['a'], 'inputs': ['a']})} Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ")),
    case("neither_instances_nor_inputs", f"{JSON} FillPredictRequestFromJson",
         Rest("POST", P, {"signature_name": "serving_default"}, 400, "Missing 'inputs' or 'instances' key")),
    case("instances_not_a_list", f"{JSON} FillPredictRequestFromJson",
         Rest("POST", P, {"instances": "a"}, 400, f"JSON Value: {pretty({'instances': 'a'})} Expecting 'instances' to be an list/array")),
    case("instances_empty", f"{JSON} FillPredictRequestFromJson",
         Rest("POST", P, {"instances": []}, 400, f"JSON Value: {pretty({'instances': []})} No values in 'instances' array")),
    case("ragged_instances", f"{JSON_TEST}; {JSON} AddInstanceItem",
         Rest("POST", P, {"instances": [["a"], ["b", "c"]]}, 400, ELEMENT.format(1, "Expecting tensor size: 1 but got: 2"))),
    case("instances_of_other_shapes", f"{JSON_TEST}; {JSON} AddInstanceItem",
         Rest("POST", P, {"instances": [["a", "b"], [["c"], ["d"]]]}, 400, ELEMENT.format(1, "Expecting shape [2] but got: [2,1]"))),
    case("value_at_wrong_level", f"{JSON} FillTensorProto",
         Rest("POST", P, {"inputs": [["a"], "b"]}, 400, 'JSON Value: "b" found at incorrect level: 2 in the JSON DOM. Expected at level: 2')),
    case("list_too_deep", f"{JSON} FillTensorProto",
         Rest("POST", P, {"inputs": ["a", ["b"]]}, 400, "Encountered list at unexpected level: 1 expected < 1")),
    case("object_then_value", f"{JSON_TEST}; {JSON} FillTensorMapFromInstancesList",
         Rest("POST", P, {"signature_name": "pair", "instances": [{"a": "x", "b": "y"}, "z"]}, 400, "Expecting object but got list at item 1 of input list")),
    case("value_then_object", f"{JSON_TEST}; {JSON} FillTensorMapFromInstancesList",
         Rest("POST", P, {"instances": ["a", {"sentences": "b"}]}, 400, "Expecting value/list but got object at item 1 of input list")),
    case("unused_named_inputs_ignored", f"{JSON} FillTensorMapFromInputsMap (reads the signature's inputs only)",
         Rest("POST", P, {"inputs": {"sentences": ["ab"], "other": [1]}, "extra": True}, 200,
              {"outputs": {"scores": [0.2], "translations": ["AB"]}})),
    case("b64_input", f"{JSON} JsonDecodeBase64Object",
         Rest("POST", P, {"instances": [{"b64": "YWI="}]}, 200, AB)),
    case("bad_b64", f"{JSON} JsonDecodeBase64Object",
         Rest("POST", P, {"instances": [{"b64": "!!"}]}, 400, ELEMENT.format(0, "Unable to base64 decode"))),
    case("b64_with_whitespace_no_padding", f"{JSON} JsonDecodeBase64Object; absl/strings/escaping.cc Base64UnescapeInternal",
         Rest("POST", P, {"instances": [{"b64": "YW\nI"}]}, 200, AB)),
    case("b64_web_safe", f"{JSON} JsonDecodeBase64Object; absl/strings/escaping.cc Base64Unescape (standard alphabet)",
         Rest("POST", P, {"instances": [{"b64": "-_8="}]}, 400, ELEMENT.format(0, "Unable to base64 decode"))),
    case("b64_not_a_string", f"{JSON} Base64FormatError",
         Rest("POST", P, {"inputs": [{"b64": 1}]}, 400, f"JSON Value: {pretty({'b64': 1})} not formatted correctly for base64 data")),
    case("number_for_string", f"{HANDLER_TEST} PredictRequestErrors; {JSON} TypeError",
         Rest("POST", P, {"instances": [1]}, 400, ELEMENT.format(0, "JSON Value: 1 Type: Number is not of expected type: string"))),
    case("number_for_string_columnar", f"{JSON} TypeError (DataTypeString)",
         Rest("POST", P, {"inputs": [1.5]}, 400, "JSON Value: 1.5 Type: Number is not of expected type: string")),
    case("string_for_int32", f"{JSON} AddValueToTensor",
         Rest("POST", P, {"signature_name": "detokenize", "inputs": ["a"]}, 400, 'JSON Value: "a" Type: String is not of expected type: int32')),
    case("multi_input_plain_list", f"{JSON} FillTensorMapFromInstancesList",
         Rest("POST", P, {"signature_name": "pair", "instances": ["a"]}, 400, PAIR_OBJECTS + " required as per tensorinfo_map")),
    case("multi_input_plain_inputs", f"{JSON} FillTensorMapFromInputsMap",
         Rest("POST", P, {"signature_name": "pair", "inputs": ["a"]}, 400,
              "inputs is a plain value/list, but expecting an object as multiple input tensors required as per tensorinfo_map")),
    case("missing_named_input", f"{JSON} FillTensorMapFromInputsMap",
         Rest("POST", P, {"signature_name": "pair", "inputs": {"a": ["x"]}}, 400, "Missing named input: b in 'inputs' object.")),
    case("unknown_named_input", f"{JSON} FillTensorMapFromInstancesList",
         Rest("POST", P, {"signature_name": "pair", "instances": [{"a": "x", "c": "y"}]}, 400,
              "Failed to process element: 0 key: c of 'instances' list. Error: INVALID_ARGUMENT: JSON object: does not have named input: c")),
    case("object_missing_a_key", f"{JSON} FillTensorMapFromInstancesList",
         Rest("POST", P, {"signature_name": "pair", "instances": [{"a": "x"}]}, 400,
              f"Failed to process element: 0 of 'instances' list. JSON object: {pretty({'a': 'x'})} keys must be equal to: a,b")),
    # --- inputs and outputs against the signature (predict_util.cc PreProcessPrediction) --------
    case("missing_input", f"{PREDICT_UTIL} VerifyRequestInputsSize",
         rpc=Rpc("Predict", lambda: predict("pair", a=[b"x"]), "INVALID_ARGUMENT", SIZE.format(1, 2, "a", "a,b", "", "b"))),
    case("extra_input", f"{PREDICT_UTIL} VerifyRequestInputsSize",
         rpc=Rpc("Predict", lambda: predict(sentences=[b"a"], extra=[b"x"]), "INVALID_ARGUMENT",
                 SIZE.format(2, 1, "extra,sentences", "sentences", "extra", ""))),
    case("other_input_names", "tensorflow/cc/saved_model/util.cc GetInputValues",
         rpc=Rpc("Predict", lambda: predict("pair", a=[b"x"], c=[b"y"]), "INVALID_ARGUMENT",
                 "Signature input alias: b(feed name: pair_b:0) not found in request and no default value provided. "
                 "Inputs expected to be in the request {a,c}, or default input alias set: ")),
    case("signature_before_tensors", f"{PREDICT_UTIL} RunPredict (the signature, then GetInputValues)",
         rpc=Rpc("Predict", lambda: malformed_tensor("nope"), "FAILED_PRECONDITION", 'Serving signature key "nope" not found.')),
    case("unknown_output_filter", f"{PREDICT_UTIL} PreProcessPrediction",
         rpc=Rpc("Predict", lambda: predict(filters=["nope"], sentences=[b"a"]), "INVALID_ARGUMENT",
                 "output tensor alias not found in signature: nope Outputs expected to be in the set {scores,translations}.")),
    case("duplicate_output_filter", f"{PREDICT_UTIL} PreProcessPrediction",
         rpc=Rpc("Predict", lambda: predict(filters=["scores", "scores", "nope"], sentences=[b"a"]), "INVALID_ARGUMENT",
                 "duplicate output tensor alias: scores")),
    case("output_filter_before_dtype", f"{PREDICT_UTIL} RunPredict (PreProcessPrediction, then Session::Run)",
         rpc=Rpc("Predict", lambda: predict(filters=["nope"], sentences=[1.5]), "INVALID_ARGUMENT",
                 Sub("output tensor alias not found in signature: nope"))),
    case("float_for_string", "tensorflow/core/framework/function.cc FunctionCallFrame::SetArgs (via Session::Run)",
         rpc=Rpc("Predict", lambda: predict(sentences=[1.5]), "INVALID_ARGUMENT", "Expects arg[0] to be string but float is provided")),
    case("malformed_tensor", "tensorflow/cc/saved_model/util.cc GetInputValues (Tensor::FromProto)",
         rpc=Rpc("Predict", malformed_tensor, "INVALID_ARGUMENT", "tensor parsing error: sentences")),
    # --- status (get_model_status_impl.cc) and metadata (get_model_metadata_impl.cc) -------------
    case("status", f"{HANDLER_TEST} GetStatus",
         Rest("GET", "/v1/models/toy", None, 200, STATUS), Rpc("GetModelStatus", status, "OK", STATUS_GRPC)),
    case("status_of_version", f"{HANDLER_TEST} GetStatus",
         Rest("GET", "/v1/models/toy/versions/1", None, 200, STATUS), Rpc("GetModelStatus", lambda: status(version=1), "OK", STATUS_GRPC)),
    case("status_unknown_model", STATUS_IMPL,
         Rest("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
         Rpc("GetModelStatus", lambda: status("nope"), "NOT_FOUND", "Could not find any versions of model nope")),
    case("status_unknown_version", STATUS_IMPL,
         Rest("GET", "/v1/models/toy/versions/9", None, 404, "Could not find version 9 of model toy"),
         Rpc("GetModelStatus", lambda: status(version=9), "NOT_FOUND", "Could not find version 9 of model toy")),
    case("status_version_of_unknown_model", STATUS_IMPL,
         Rest("GET", "/v1/models/nope/versions/9", None, 404, "Could not find version 9 of model nope"),
         Rpc("GetModelStatus", lambda: status("nope", version=9), "NOT_FOUND", "Could not find version 9 of model nope")),
    case("status_empty_model_name", f"{STATUS_IMPL} (no check of the name)",
         rpc=Rpc("GetModelStatus", lambda: status(""), "NOT_FOUND", "Could not find any versions of model ")),
    case("status_no_model_spec", STATUS_IMPL,
         rpc=Rpc("GetModelStatus", without_spec(status), "INVALID_ARGUMENT", "Missing ModelSpec")),
    case("metadata_unknown_model", f"{METADATA_IMPL} SavedModelGetSignatureDef; {BASIC_MANAGER}",
         Rest("GET", "/v1/models/nope/metadata", None, 404, "Servable not found for request: Latest(nope)"),
         Rpc("GetModelMetadata", lambda: metadata("signature_def", name="nope"), "NOT_FOUND", "Servable not found for request: Latest(nope)")),
    case("metadata_no_field", f"{METADATA_IMPL} ValidateGetModelMetadataRequest",
         rpc=Rpc("GetModelMetadata", metadata, "INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field")),
    case("metadata_unknown_field", f"{METADATA_IMPL} ValidateGetModelMetadataRequest",
         rpc=Rpc("GetModelMetadata", lambda: metadata("signature_def", "graph"), "INVALID_ARGUMENT", "Metadata field graph is not supported")),
    case("metadata_no_model_spec", METADATA_IMPL,
         rpc=Rpc("GetModelMetadata", without_spec(metadata), "INVALID_ARGUMENT", "Missing ModelSpec")),
    # --- classify (servables/tensorflow/classifier.cc, classification_service.cc) ----------------
    case("classify_a_predict_signature", "servables/tensorflow/classifier.cc GetClassificationSignatureDef",
         Rest("POST", "/v1/models/toy:classify", {"examples": [{}]}, 400, Sub("No classification inputs found in SignatureDef: ")),
         Rpc("Classify", classify, "INVALID_ARGUMENT", Sub("No classification inputs found in SignatureDef: "))),
    case("classify_unknown_signature", "servables/tensorflow/classifier.cc GetClassificationSignatureDef",
         Rest("POST", "/v1/models/toy:classify", {"signature_name": "nope", "examples": [{}]}, 400, "No signature was found with the name: nope"),
         Rpc("Classify", lambda: classify("nope"), "INVALID_ARGUMENT", "No signature was found with the name: nope")),
    case("classify", f"{HANDLER_TEST} Classify; {CLASSIFIER_TEST} ExampleList",
         Rest("POST", C, {"signature_name": "classify", "examples": [{"x": 0.25}, {}]}, 200,
              {"results": [[["a", 0.25], ["b", 0.75]], [["a", 0.0], ["b", 1.0]]]}),
         Rpc("Classify", lambda: classify("classify", "cls", (0.25, None)), "OK", CLASSIFIED)),
    case("classify_scores_only", f"{HANDLER_TEST} Classify (no classes: label \"\"); {CLASSIFIER_TEST} ScoresOnly",
         Rest("POST", C, {"signature_name": "scores_only", "examples": [{"x": 0.25}]}, 200,
              {"results": [[["", 0.25], ["", 0.75]]]})),
    case("classify_context", f"{CLASSIFIER_TEST} ExampleListWithContext; {JSON} FillClassificationRequestFromJson",
         Rest("POST", C, {"signature_name": "classify", "context": {"x": 0.5}, "examples": [{}, {"x": 1.0}]}, 200,
              {"results": [[["a", 0.5], ["b", 0.5]], [["a", 1.0], ["b", 0.0]]]})),
    case("classify_empty_input", f"{CLASSIFIER_TEST} EmptyInput",
         rpc=Rpc("Classify", lambda: classify("classify", "cls", ()), "INVALID_ARGUMENT", "Input is empty.")),
    case("classify_no_examples", f"{JSON_TEST}; {JSON} FillClassificationRequestFromJson",
         Rest("POST", C, {"signature_name": "classify", "examples": []}, 400,
              f"JSON Value: {pretty({'signature_name': 'classify', 'examples': []})} 'examples' value is an empty array")),
    case("classify_unknown_model", BASIC_MANAGER,
         Rest("POST", "/v1/models/nope:classify", {"examples": [{}]}, 404, "Servable not found for request: Latest(nope)"),
         Rpc("Classify", lambda: classify(name="nope"), "NOT_FOUND", "Servable not found for request: Latest(nope)")),
    case("classify_no_model_spec", "servables/tensorflow/classification_service.cc",
         rpc=Rpc("Classify", without_spec(classify), "INVALID_ARGUMENT", "Missing ModelSpec")),
]  # fmt: skip
