"""The TF Serving op allow-list check."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from toy_model import save_toy_model
from xla_saved_model import save_xla_model

from keras_transformer.serving import ops

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    return save_toy_model(tmp_path_factory.mktemp("ops") / "toy")


@pytest.fixture(scope="module")
def xla_dir(tmp_path_factory):
    return save_xla_model(tmp_path_factory.mktemp("ops") / "xla")


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
    # Ops whose kernels compile with XLA on first use are out, and listed apart.
    xla = ops.load_xla_ops()
    assert {"XlaDynamicUpdateSlice", "XlaEinsum", "XlaLaunch", "_XlaCompile"} <= xla
    assert not xla & allowed
    assert not any(op.startswith(("Xla", "_Xla")) for op in allowed)
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


def test_xla_graph_is_refused_naming_op_and_function(xla_dir):
    graph_def = ops._graph_defs(xla_dir)[0]
    needs = ops.xla_requirements(graph_def)
    assert any(line.startswith("op XlaDynamicUpdateSlice (node ") for line in needs)
    assert any("is marked _XlaMustCompile" in line for line in needs)
    with pytest.raises(ValueError) as e:
        ops.check_serving_ops(xla_dir)
    message = str(e.value)
    # The op, the function it sits in, the function marked for XLA, and the flag.
    assert re.search(
        r"op XlaDynamicUpdateSlice \(node '[^']+' in function __inference_\w+\)", message
    )
    assert re.search(r"function __inference_update_\w+ is marked _XlaMustCompile", message)
    assert "--xla_cpu_compilation_enabled=true" in message
    assert ops.main([xla_dir]) == 1


def test_toy_model_needs_no_xla(toy_dir):
    assert ops.xla_requirements(ops._graph_defs(toy_dir)[0]) == []


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
@pytest.mark.parametrize("xla", [False, True], ids=["allowed_ops", "xla_ops"])
def test_op_lists_are_reproducible(xla):
    """Regenerating each list in a fresh interpreter gives the committed op names."""
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "allowlist_gen.py")]
        + (["--xla"] if xla else []),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    ).stdout
    fresh = {line for line in out.splitlines() if line and not line.startswith("#")}
    assert fresh == set(ops.load_xla_ops() if xla else ops.load_allowed_ops())
