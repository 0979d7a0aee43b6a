"""Regenerate ``allowed_ops.txt``: the ops a stock TF Serving model server can run.

Run in a fresh interpreter (it must import TensorFlow *without* tensorflow_text, so that the
core registry is not polluted by tf-text's ops)::

    python -m keras_transformer.serving._allowlist_gen > keras_transformer/serving/allowed_ops.txt

How the list is derived:

1. TF core: every op def in the registry of the installed ``tensorflow`` (read through the C
   API, ``TF_GetAllOpList``) that has at least one kernel registered for CPU, GPU or DEFAULT
   devices. That drops op defs with no runnable kernel here: TPU/XLA-only ops and the test ops
   (``A``, ``Foo1``, ...) that the Python wheel registers. Then ops whose kernels live only in
   the Python runtime (``tensorflow/python/lib/core/py_func.cc``), which the C++ model server
   does not link, are removed: ``PyFunc``, ``PyFuncStateless``, ``EagerPyFunc``, and the test op
   ``TestAttr``.
2. tf-text: TF Serving's ``SUPPORTED_TENSORFLOW_OPS`` (tensorflow_serving/model_servers/BUILD)
   links ``@org_tensorflow_text//tensorflow_text:ops_lib``. Each ``*_cc`` dep of ``ops_lib``
   (tensorflow_text/BUILD) is built into one ``_*.so`` in the tensorflow-text wheel; each of
   those is loaded with ``tf.load_op_library`` and the ops it adds to the registry are recorded.
   ``sentencepiece_mobile_tokenizer_cc`` has no ``.so`` in the wheel; its two ops are taken
   from ``tensorflow_text/core/ops/sentencepiece_mobile_ops.cc``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# The ``*_cc`` deps of tensorflow_text:ops_lib and the wheel file each is built into.
OPS_LIB_WHEEL_FILES: dict[str, str | None] = {
    "boise_offset_converter_cc": "python/ops/_boise_offset_converter.so",
    "byte_splitter_cc": "python/ops/_byte_splitter.so",
    "constrained_sequence_op_cc": "python/ops/_constrained_sequence_op.so",
    "fast_bert_normalizer_cc": "python/ops/_fast_bert_normalizer.so",
    "fast_sentencepiece_tokenizer_cc": "python/ops/_fast_sentencepiece_tokenizer.so",
    "fast_wordpiece_tokenizer_cc": "python/ops/_fast_wordpiece_tokenizer.so",
    "mst_ops_cc": "python/ops/_mst_ops.so",
    "ngrams_op_cc": "python/ops/_ngrams_op.so",
    "normalize_ops_cc": "python/ops/_normalize_ops.so",
    "phrase_tokenizer_cc": "python/ops/_phrase_tokenizer.so",
    "regex_split_ops_cc": "python/ops/_regex_split_ops.so",
    "sentence_breaking_ops_cc": "python/ops/_sentence_breaking_ops.so",
    "sentencepiece_mobile_tokenizer_cc": None,
    "sentencepiece_tokenizer_cc": "python/ops/_sentencepiece_tokenizer.so",
    "split_merge_from_logits_tokenizer_cc": "python/ops/_split_merge_from_logits_tokenizer.so",
    "split_merge_tokenizer_cc": "python/ops/_split_merge_tokenizer.so",
    "state_based_sentence_breaker_op_cc": "python/ops/_state_based_sentence_breaker_op.so",
    "text_similarity_metric_ops_cc": "python/metrics/_text_similarity_metric_ops.so",
    "trimmer_ops_cc": "python/ops/_trimmer_ops.so",
    "unicode_script_tokenizer_cc": "python/ops/_unicode_script_tokenizer.so",
    "utf8_binarize_op_cc": "python/ops/_utf8_binarize_op.so",
    "whitespace_tokenizer_cc": "python/ops/_whitespace_tokenizer.so",
    "whitespace_tokenizer_v2_cc": "python/ops/_whitespace_tokenizer_v2.so",
    "wordpiece_tokenizer_cc": "python/ops/_wordpiece_tokenizer.so",
}

# REGISTER_OP names in tensorflow_text/core/ops/sentencepiece_mobile_ops.cc (no .so in the wheel).
SENTENCEPIECE_MOBILE_OPS = ("TFSentencepieceDetokenizeOp", "TFSentencepieceTokenizeOp")

# Registered by the Python wheel, but their kernels are Python-runtime only (or test-only).
PYTHON_ONLY_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless", "TestAttr"})

_KERNEL_DEVICES = frozenset({"CPU", "GPU", "DEFAULT"})


def _registered_ops() -> set[str]:
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    op_list = op_def_pb2.OpList()
    op_list.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    return {op.name for op in op_list.op}


def tf_core_ops() -> list[str]:
    """Core TF ops with a CPU/GPU kernel, minus Python-only ones (import TF only first)."""
    if "tensorflow_text" in sys.modules:
        raise RuntimeError("tensorflow_text is imported; run this in a fresh interpreter")
    import tensorflow  # noqa: F401
    from tensorflow.python.framework import kernels

    keep = []
    for name in sorted(_registered_ops()):
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(name).kernel}
        if devices & _KERNEL_DEVICES and name not in PYTHON_ONLY_OPS:
            keep.append(name)
    return keep


def tf_text_ops() -> dict[str, list[str]]:
    """Ops added by each ``ops_lib`` dep (loaded from the installed tensorflow-text wheel)."""
    import tensorflow as tf

    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None or spec.origin is None:
        raise RuntimeError("tensorflow-text is not installed")
    root = os.path.dirname(spec.origin)
    result: dict[str, list[str]] = {}
    for target, rel in OPS_LIB_WHEEL_FILES.items():
        if rel is None:
            result[target] = list(SENTENCEPIECE_MOBILE_OPS)
            continue
        before = _registered_ops()
        tf.load_op_library(os.path.join(root, rel))
        result[target] = sorted(_registered_ops() - before)
    return result


def render() -> str:
    import tensorflow as tf

    core = tf_core_ops()
    text = tf_text_ops()
    try:
        from importlib.metadata import version

        tft_version = version("tensorflow-text")
    except Exception:  # pragma: no cover - metadata missing
        tft_version = "unknown"
    lines = [
        "# Ops a stock TensorFlow Serving model server (tensorflow/serving) can run.",
        "# Generated by: python -m keras_transformer.serving._allowlist_gen",
        "# Source:",
        f"#  * TF core: op defs registered by tensorflow {tf.__version__} (import tensorflow",
        "#    only; C API TF_GetAllOpList) that have a CPU/GPU/DEFAULT kernel registered, minus",
        "#    " + ", ".join(sorted(PYTHON_ONLY_OPS)) + " (kernels only in the",
        "#    Python runtime, tensorflow/python/lib/core/py_func.cc, or a test op; the C++",
        "#    model server does not link them).",
        "#  * tf-text: TF Serving links @org_tensorflow_text//tensorflow_text:ops_lib",
        "#    (SUPPORTED_TENSORFLOW_OPS in tensorflow_serving/model_servers/BUILD). The ops of",
        "#    each ops_lib dep (tensorflow_text/BUILD) were read by loading its _*.so from the",
        f"#    installed tensorflow-text {tft_version} wheel; sentencepiece_mobile_tokenizer_cc",
        "#    has no .so in the wheel: its ops are from core/ops/sentencepiece_mobile_ops.cc.",
        "# Uncertainty:",
        "#  * The ops_lib dep list was read from tensorflow/text's BUILD file as stored in a",
        "#    public index (not pinned to the 2.20 tag); the wheel's .so files match it 1:1.",
        "#  * The op defs are from the installed TF; a model server built on an older TF may",
        "#    lack ops added since. Pin the tensorflow/serving image to the exporting TF version.",
        "#  * TF Serving also links TensorFlow Decision Forests inference ops; they are left out",
        "#    (leaving ops out only makes the check stricter).",
        "#  * Kernel availability is per device: a few listed ops have only GPU kernels.",
        "",
        f"# --- TF core ({len(core)} ops) ---",
        *core,
    ]
    for target, ops in text.items():
        lines.append(f"# --- tensorflow_text:{target} ---")
        lines.extend(ops)
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
