"""The TF Serving op allow-list check."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_transformer.serving import ops
from keras_transformer.serving.toy_model import save_toy_model

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    return save_toy_model(tmp_path_factory.mktemp("ops") / "toy")


@pytest.fixture(scope="module")
def py_function_dir(tmp_path_factory):
    class Bad(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, sentences):
            upper = tf.py_function(lambda s: tf.strings.upper(s), [sentences], tf.string)
            return {"translations": upper}

    module = Bad()
    path = str(tmp_path_factory.mktemp("ops") / "bad")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def test_allow_list_contents():
    allowed = ops.load_allowed_ops()
    assert {"StatefulPartitionedCall", "StringUpper", "MatMul", "Softmax", "While"} <= allowed
    # tf-text ops_lib kernels that TF Serving links.
    assert {
        "SentencepieceOp",
        "FastWordpieceTokenizeWithOffsets",
        "NormalizeUTF8",
        "RegexSplitWithOffsets",
        "TFText>FastSentencepieceTokenize",
    } <= allowed
    assert not {"EagerPyFunc", "PyFunc", "PyFuncStateless"} & allowed
    with open(os.path.join(REPO, "keras_transformer", "serving", "allowed_ops.txt")) as f:
        assert f.readline().startswith("#")


def test_graph_ops_includes_function_library(toy_dir):
    found = ops.graph_ops(toy_dir)
    assert {"StringUpper", "UnicodeDecode", "StatefulPartitionedCall", "Placeholder"} <= found
    assert not any(name.startswith("__inference") for name in found)


def test_toy_model_passes(toy_dir):
    ops.check_serving_ops(toy_dir)
    assert ops.main([toy_dir]) == 0


def test_py_function_fails_with_clear_message(py_function_dir):
    with pytest.raises(ValueError) as e:
        ops.check_serving_ops(py_function_dir)
    message = str(e.value)
    assert "EagerPyFunc" in message and "tf.py_function" in message
    assert ops.main([py_function_dir]) == 1


def test_tf_text_op_passes(tmp_path):
    import tensorflow_text as tf_text

    class Norm(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, sentences):
            return {"out": tf_text.normalize_utf8(sentences, "NFKC")}

    module = Norm()
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    assert "NormalizeUTF8" in ops.graph_ops(tmp_path)
    ops.check_serving_ops(tmp_path)


def test_missing_saved_model(tmp_path):
    with pytest.raises(FileNotFoundError):
        ops.graph_ops(tmp_path)


@pytest.mark.slow
def test_allow_list_is_reproducible():
    """Regenerating the list in a fresh interpreter gives the committed op names."""
    out = subprocess.run(
        [sys.executable, "-m", "keras_transformer.serving._allowlist_gen"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    ).stdout
    fresh = {line for line in out.splitlines() if line and not line.startswith("#")}
    assert fresh == set(ops.load_allowed_ops())
