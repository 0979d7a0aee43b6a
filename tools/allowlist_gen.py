"""Regenerate ``allowed_ops.txt`` (the ops a stock TF Serving model server runs) and
``xla_ops.txt`` (the ops it refuses to run because they need XLA compilation).

Run in a fresh interpreter (it must import TensorFlow *without* tensorflow_text, so that the
core registry is not polluted by tf-text's ops)::

    python tools/allowlist_gen.py > keras_transformer/serving/allowed_ops.txt
    python tools/allowlist_gen.py --xla > keras_transformer/serving/xla_ops.txt

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
3. XLA ops are left out of the allow-list and listed in ``xla_ops.txt``: the ops of the XLA
   op libraries (tf2xla's ``tensorflow/compiler/tf2xla/ops/xla_ops.cc`` and the JIT's
   ``tensorflow/compiler/jit/ops/xla_ops.cc``, read from their generated Python wrappers),
   plus the JIT's hidden ops (``_Xla*``: ``_XlaCompile``, ``_XlaRun``, ``_XlaMerge``, which
   have no wrapper), each kept when it has a CPU/GPU kernel. Those kernels are
   ``XlaCompileOnDemandOp`` (``tensorflow/compiler/jit/xla_ops_on_regular_devices.cc``) or
   the XLA launch kernels (``tensorflow/compiler/jit/kernels/xla_ops.cc``): both compile
   with XLA when they first run. ``tensorflow_model_server`` calls
   ``tensorflow::DisableXlaCompilation()`` unless it is started with
   ``--xla_cpu_compilation_enabled=true`` (``tensorflow_serving/model_servers/main.cc``),
   after which that compilation fails with ``INTERNAL: XLA compilation disabled``
   (tensorflow/serving#2217).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
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

# The generated Python wrappers of the XLA op libraries (see the module docstring).
XLA_OP_MODULES = (
    "tensorflow.compiler.tf2xla.ops.gen_xla_ops",
    "tensorflow.compiler.jit.ops.xla_ops",
)
_HIDDEN_JIT_OP_PREFIX = "_Xla"


def _registered_ops() -> set[str]:
    from keras_transformer.compat import registered_op_names

    return registered_op_names()


def _kernel_devices(name: str) -> set[str]:
    from keras_transformer.compat import kernel_devices

    return kernel_devices(name)


def xla_ops() -> list[str]:
    """Registered ops that need XLA compilation to run (see the module docstring)."""
    import tensorflow  # noqa: F401

    registered = _registered_ops()
    found = set()
    for module_name in XLA_OP_MODULES:
        source = inspect.getsource(importlib.import_module(module_name))
        names = set(re.findall(r'_apply_op_helper\(\s*"(\w+)"', source))
        if not names or not names <= registered:
            raise RuntimeError(f"Could not read the op names of {module_name}")
        found |= names
    found |= {name for name in registered if name.startswith(_HIDDEN_JIT_OP_PREFIX)}
    return sorted(name for name in found if _kernel_devices(name) & _KERNEL_DEVICES)


def tf_core_ops() -> list[str]:
    """Core TF ops with a CPU/GPU kernel, minus Python-only and XLA ones (import TF only)."""
    if "tensorflow_text" in sys.modules:
        raise RuntimeError("tensorflow_text is imported; run this in a fresh interpreter")
    import tensorflow  # noqa: F401

    excluded = PYTHON_ONLY_OPS | set(xla_ops())
    return [
        name
        for name in sorted(_registered_ops())
        if _kernel_devices(name) & _KERNEL_DEVICES and name not in excluded
    ]


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
        "# Generated by: python tools/allowlist_gen.py",
        "# Source:",
        f"#  * TF core: op defs registered by tensorflow {tf.__version__} (import tensorflow",
        "#    only; C API TF_GetAllOpList) that have a CPU/GPU/DEFAULT kernel registered, minus",
        "#    " + ", ".join(sorted(PYTHON_ONLY_OPS)) + " (kernels only in the",
        "#    Python runtime, tensorflow/python/lib/core/py_func.cc, or a test op; the C++",
        "#    model server does not link them), minus the ops that need XLA compilation",
        "#    (xla_ops.txt beside this file, which says why).",
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


def render_xla() -> str:
    import tensorflow as tf

    names = xla_ops()
    lines = [
        "# Ops that need XLA compilation: a stock TensorFlow Serving model server refuses them.",
        "# Generated by: python tools/allowlist_gen.py --xla",
        f"# Source: tensorflow {tf.__version__}: the ops of the XLA op libraries (their",
        "#   generated wrappers " + ", ".join(XLA_OP_MODULES) + ")",
        "#   and the JIT's hidden _Xla* ops, each with a CPU/GPU kernel registered.",
        "# Why: their CPU/GPU kernels (XlaCompileOnDemandOp,",
        "#   tensorflow/compiler/jit/xla_ops_on_regular_devices.cc, and the XLA launch kernels)",
        "#   compile with XLA on first use; tensorflow_model_server disables XLA compilation",
        "#   unless started with --xla_cpu_compilation_enabled=true",
        "#   (tensorflow_serving/model_servers/main.cc), so the first request fails with",
        '#   "INTERNAL: XLA compilation disabled" (tensorflow/serving#2217).',
        "",
        *names,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sys.stdout.write(render_xla() if "--xla" in argv else render())


if __name__ == "__main__":
    main()
