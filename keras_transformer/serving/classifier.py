"""TF Serving's Classify API on a loaded version, after ``tensorflow_serving/servables/
tensorflow/classifier.cc`` (``RunClassify``), ``util.cc`` and ``classification_service.cc``.

A ``ClassificationRequest`` names a model spec and holds ``tf.Example``s
(``input.example_list``, or ``input.example_list_with_context``, whose context's bytes are
put before each example's, so the example's features win where both have one). The
signature (``model_spec.signature_name``, default ``serving_default``) must have one input,
``inputs``, fed the serialized examples as a string vector, and ``classes`` (DT_STRING)
and/or ``scores`` (DT_FLOAT) outputs, each [batch, num_classes]; the answer is a
``ClassificationResponse``: for each example, its classes' ``label``/``score``. The checks and
their messages are TF Serving's, in its order: the signature (``GetClassificationSignatureDef``,
``PreProcessClassification``; with ``--enable_signature_method_name_check`` its method name
too), an empty input, the session run, then the outputs (``PostProcessClassificationResult``).
The run goes through :meth:`ServerCore.predict`, so a batching server batches classify
requests as TF Serving's batching session does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import classification_pb2

from keras_transformer.serving.errors import invalid
from keras_transformer.serving.servable import DEFAULT_SIGNATURE, Servable

# A run of a signature: (servable, signature name, arrays by input alias, output aliases).
RunSignature = Callable[[Servable, str, Mapping[str, np.ndarray], Sequence[str]], dict]
# TF's signature_constants (tensorflow/cc/saved_model/signature_constants.h).
_INPUTS = tf.saved_model.CLASSIFY_INPUTS
_CLASSES = tf.saved_model.CLASSIFY_OUTPUT_CLASSES
_SCORES = tf.saved_model.CLASSIFY_OUTPUT_SCORES


def _debug_string(signature: Any) -> str:
    """``SignatureDef::DebugString()``: the text format."""
    return text_format.MessageToString(signature)


def classification_signature(servable: Servable, signature_name: str) -> Any:
    """The request's SignatureDef, checked as ``GetClassificationSignatureDef`` checks it.

    Args:
        servable: the acquired version.
        signature_name: the request's (empty: ``serving_default``).

    Returns:
        The ``SignatureDef``.

    Raises:
        ServingStatusError: INVALID_ARGUMENT, with TF Serving's message, for a missing or
            unfit signature.
    """
    name = signature_name or DEFAULT_SIGNATURE
    signature = servable.signatures.get(name)
    if signature is None:
        raise invalid(f"No signature was found with the name: {name}")
    if servable.method_name_check and signature.method_name != tf.saved_model.CLASSIFY_METHOD_NAME:
        raise invalid(
            "Expected classification signature method_name to be "
            f"{tf.saved_model.CLASSIFY_METHOD_NAME}. Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise invalid("Expected one input Tensor.")
    if len(signature.outputs) not in (1, 2):
        raise invalid(f"Expected one or two output Tensors, found {len(signature.outputs)}")
    if _INPUTS not in signature.inputs:
        raise invalid(f"No classification inputs found in SignatureDef: {_debug_string(signature)}")
    if not set(signature.outputs) & {_CLASSES, _SCORES}:
        raise invalid(
            "Expected classification signature outputs to contain at least one of "
            f'"{_CLASSES}" or "{_SCORES}". Signature was: {_debug_string(signature)}'
        )
    return signature


def serialized_examples(input_proto: Any) -> np.ndarray:
    """``InputToSerializedExampleTensor``: the examples as a string vector, each with the
    context's bytes first; INVALID_ARGUMENT "Input is empty." for none."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples = [e.SerializeToString() for e in input_proto.example_list.examples]
    elif kind == "example_list_with_context":
        listed = input_proto.example_list_with_context
        context = listed.context.SerializeToString()
        examples = [context + e.SerializeToString() for e in listed.examples]
    else:
        examples = []
    if not examples:
        raise invalid("Input is empty.")
    array = np.empty(len(examples), dtype=object)
    array[:] = examples
    return array


def _dtype_name(array: np.ndarray) -> str:
    """The ``DataType`` name of an output array (``DT_FLOAT``, ``DT_STRING``, ...)."""
    from tensorflow.core.framework import types_pb2

    if array.dtype == object or array.dtype.kind in "SU":
        return "DT_STRING"
    try:
        return types_pb2.DataType.Name(tf.dtypes.as_dtype(array.dtype).as_datatype_enum)
    except TypeError:
        return str(array.dtype)


def _check_output(name: str, array: np.ndarray, dtype: str, num_examples: int) -> None:
    if array.ndim != 2:
        shape = "[" + ",".join(str(d) for d in array.shape) + "]"
        raise invalid(f"Expected Tensor shape: [batch_size num_classes] but got {shape}")
    got = _dtype_name(array)
    if got != dtype:
        raise invalid(f"Expected {name} Tensor of {dtype}. Got: {got}")
    if array.shape[0] != num_examples:
        raise invalid(f"Expected {name} output batch size of {num_examples}. Got: {array.shape[0]}")


def classification_result(outputs: Mapping[str, np.ndarray], num_examples: int) -> Any:
    """``PostProcessClassificationResult``: the ``ClassificationResult`` of the outputs."""
    classes, scores = outputs.get(_CLASSES), outputs.get(_SCORES)
    if classes is not None:
        _check_output("classes", classes, "DT_STRING", num_examples)
    if scores is not None:
        _check_output("scores", scores, "DT_FLOAT", num_examples)
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise invalid(
            "Tensors class and score should match in dim_size(1). Got "
            f"{classes.shape[1]} vs. {scores.shape[1]}"
        )
    num_classes = (classes if classes is not None else scores).shape[1]
    result = classification_pb2.ClassificationResult()
    for i in range(num_examples):
        classifications = result.classifications.add()
        for c in range(num_classes):
            entry = classifications.classes.add()
            if classes is not None:
                label = classes[i, c]
                try:
                    entry.label = label.decode("utf-8") if isinstance(label, bytes) else label
                except UnicodeDecodeError:
                    raise invalid(
                        f"Class label {label!r} is not valid UTF-8 (ClassificationResponse's "
                        "label is a proto string)"
                    ) from None
            if scores is not None:
                entry.score = float(scores[i, c])
    return result


def run_classify(servable: Servable, request: Any, run: RunSignature) -> Any:
    """``RunClassify`` on an acquired servable: the ``ClassificationResponse``.

    Args:
        servable: the version of ``request.model_spec``, acquired by the caller.
        request: a ``ClassificationRequest``.
        run: how the signature runs (:meth:`ServerCore.predict`).

    Returns:
        The ``ClassificationResponse``, its ``model_spec`` filled in as ``MakeModelSpec``
        does (the request's name, the signature name or ``serving_default``, the version).
    """
    signature_name = request.model_spec.signature_name
    signature = classification_signature(servable, signature_name)
    examples = serialized_examples(request.input)
    wanted = [alias for alias in (_CLASSES, _SCORES) if alias in signature.outputs]
    outputs = run(servable, signature_name or DEFAULT_SIGNATURE, {_INPUTS: examples}, wanted)
    response = classification_pb2.ClassificationResponse()
    response.model_spec.name = request.model_spec.name
    response.model_spec.signature_name = signature_name or DEFAULT_SIGNATURE
    response.model_spec.version.value = servable.version
    response.result.CopyFrom(classification_result(outputs, len(examples)))
    return response
