"""JSON <-> Classify protos for TF Serving's REST ``:classify`` (after
``tensorflow_serving/util/json_tensor.cc``: ``FillClassificationRequestFromJson``,
``MakeJsonFromClassificationResult``).

A request is ``{"signature_name": ..., "context": {...}, "examples": [{...}, ...]}``: each
example (and the optional context, which makes the input an ``example_list_with_context``)
is an object of features, each a value or a list of values: strings become a
``bytes_list``, ``{"b64": ...}`` its decoded bytes, integers (and booleans, as 1/0) an
``int64_list``, numbers with a fraction or an exponent a ``float_list``; a feature mixing kinds,
``null``, nested lists and other objects are refused with TF Serving's messages. The answer
is ``{"results": [[[label, score], ...], ...]}``, an example a row, scores in the shortest
form that round-trips in float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_transformer.serving.codec import array_to_json, b64decode, is_b64, json_str, json_type
from keras_transformer.serving.errors import ServingStatusError, invalid

CONTEXT_KEY = "context"
EXAMPLES_KEY = "examples"
RESULTS_KEY = "results"
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


def _kind_error(name: str, feature: Any) -> ServingStatusError:
    kind = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}.get(
        feature.WhichOneof("kind"), "UNKNOWN"
    )
    return invalid(f"Unexpected element type in feature: {name} expecting type: {kind}")


def _add_value(value: Any, name: str, feature: Any) -> None:
    """``AddValueToFeature``: one JSON value into a ``Feature`` of one kind."""

    def of_kind(kind: str) -> Any:
        if feature.WhichOneof("kind") not in (None, kind):
            raise _kind_error(name, feature)
        return getattr(feature, kind).value

    if value is None or isinstance(value, list) or (isinstance(value, dict) and not is_b64(value)):
        raise invalid(f"Feature: {name} has element with unexpected JSON type: {json_type(value)}")
    if isinstance(value, bool):
        of_kind("int64_list").append(1 if value else 0)
    elif isinstance(value, dict):
        of_kind("bytes_list").append(b64decode(value))
    elif isinstance(value, str):
        try:
            of_kind("bytes_list").append(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise invalid(f"JSON Value: {json_str(value)} is not valid UTF-8") from None
    elif isinstance(value, int) and value <= _UINT64_MAX:  # larger: rapidjson's double
        if not _INT64[0] <= value <= _INT64[1]:
            if value > 0:
                raise invalid(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
            of_kind("float_list").append(float(value))
        else:
            of_kind("int64_list").append(value)
    else:
        of_kind("float_list").append(float(value))


def example_from_json(value: Any, example: Any) -> None:
    """``MakeExampleFromJsonObject``: a JSON object of features into a ``tf.Example``."""
    if not isinstance(value, dict):
        raise invalid(f"Example must be JSON object but got JSON {json_type(value)}")
    from tensorflow.core.example import feature_pb2

    for name, content in value.items():
        feature = feature_pb2.Feature()
        for item in content if isinstance(content, list) else [content]:
            _add_value(item, name, feature)
        example.features.feature[name].CopyFrom(feature)


def fill_classification_request(
    request_json: Mapping[str, Any], signature_name: str, request: Any
) -> None:
    """``FillClassificationRequestFromJson``: the parsed JSON body into a
    ``ClassificationRequest`` whose ``model_spec`` names the model already.

    Args:
        request_json: the body's JSON object.
        signature_name: its ``signature_name`` (checked by the caller; may be empty).
        request: the ``ClassificationRequest`` to fill.
    """
    if signature_name:
        request.model_spec.signature_name = signature_name
    has_context = CONTEXT_KEY in request_json
    if has_context:
        example_from_json(
            request_json[CONTEXT_KEY], request.input.example_list_with_context.context
        )
    if EXAMPLES_KEY not in request_json:
        raise invalid(
            f"JSON Value: {json_str(request_json)} When method is classify, key "
            f"'{EXAMPLES_KEY}' is expected and was not found"
        )
    examples = request_json[EXAMPLES_KEY]
    if not isinstance(examples, list):
        raise invalid(
            f"JSON Value: {json_str(request_json)} Expecting '{EXAMPLES_KEY}' value to be an "
            "list/array"
        )
    if not examples:
        raise invalid(
            f"JSON Value: {json_str(request_json)} '{EXAMPLES_KEY}' value is an empty array"
        )
    listed = request.input.example_list_with_context if has_context else request.input.example_list
    for value in examples:
        example_from_json(value, listed.examples.add())


def make_classify_response(result: Any) -> dict[str, Any]:
    """``MakeJsonFromClassificationResult``: ``{"results": [[[label, score], ...], ...]}``."""
    if not result.classifications:
        raise invalid("Cannot convert empty ClassificationResults to JSON")
    rows = []
    for classifications in result.classifications:
        scores = array_to_json(
            np.asarray([c.score for c in classifications.classes], np.float32), "scores"
        )
        rows.append([[c.label, score] for c, score in zip(classifications.classes, scores)])
    return {RESULTS_KEY: rows}
