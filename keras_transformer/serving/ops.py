"""Check that an exported SavedModel runs on a stock TF Serving model server.

Two rules, both read from ``saved_model.pb`` (function library included):

- every op is on the allow-list (``allowed_ops.txt`` beside this module): TF core ops plus
  the ops of tensorflow-text's ``ops_lib`` target, which TF Serving links; its header says
  how it was derived. A graph with any other op (``tf.py_function``'s ``EagerPyFunc``, a
  custom op from another library, ...) loads in Python but fails in
  ``tensorflow_model_server`` with "Op type not registered";
- nothing needs XLA compilation: no op of ``xla_ops.txt`` (``XlaDynamicUpdateSlice``, ...,
  whose kernels compile with XLA on first use) and no function or node marked for XLA
  compilation (``_XlaMustCompile``/``_XlaCompile``, as ``tf.function(jit_compile=True)``
  writes). ``tensorflow_model_server`` disables XLA compilation unless started with
  ``--xla_cpu_compilation_enabled=true``; such a model loads, then fails its first request
  with "INTERNAL: XLA compilation disabled" (tensorflow/serving#2217).

Usage::

    python -m keras_transformer.serving.ops EXPORT_DIR [EXPORT_DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from importlib import resources

from keras_transformer import storage

ALLOWED_OPS_FILE = "allowed_ops.txt"
XLA_OPS_FILE = "xla_ops.txt"
# Attributes with which TF marks a function (or a call node) for XLA compilation.
XLA_COMPILE_ATTRS = ("_XlaMustCompile", "_XlaCompile")
# The flag of tensorflow_model_server that turns XLA compilation back on.
XLA_FLAG = "--xla_cpu_compilation_enabled=true"

_HINTS = {
    "EagerPyFunc": "tf.py_function runs Python code, which the C++ model server does not have",
    "PyFunc": "tf.numpy_function / tf.compat.v1.py_func runs Python code",
    "PyFuncStateless": "tf.numpy_function(stateful=False) runs Python code",
}


def _load_op_list(path: str | os.PathLike[str] | None, packaged: str) -> frozenset[str]:
    if path is None:
        text = resources.files(__package__).joinpath(packaged).read_text("utf-8")
    else:
        text = storage.read_text(os.fspath(path))
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def load_allowed_ops(path: str | os.PathLike[str] | None = None) -> frozenset[str]:
    """The allow-list: one op name per line; ``#`` comments and blank lines are skipped."""
    return _load_op_list(path, ALLOWED_OPS_FILE)


def load_xla_ops() -> frozenset[str]:
    """The ops that need XLA compilation (``xla_ops.txt``, generated beside the allow-list)."""
    return _load_op_list(None, XLA_OPS_FILE)


def _read_saved_model(saved_model_dir: str | os.PathLike[str]):
    from tensorflow.core.protobuf import saved_model_pb2

    pb_path = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    if not storage.exists(pb_path):
        raise FileNotFoundError(f"No saved_model.pb in {os.fspath(saved_model_dir)!r}")
    saved_model = saved_model_pb2.SavedModel()
    with storage.open_file(pb_path, "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def _nodes(graph_def):
    """Every node of the graph and of its function library, as `(where, node)`."""
    for node in graph_def.node:
        yield "the main graph", node
    for fn in graph_def.library.function:
        for node in fn.node_def:
            yield f"function {fn.signature.name}", node


def _graph_def_ops(graph_def) -> set[str]:
    functions = {fn.signature.name for fn in graph_def.library.function}
    # A node may call a library function directly by name; that is not an op type.
    return {node.op for _, node in _nodes(graph_def)} - functions


def _op_locations(graph_def, op_names: set[str]) -> dict[str, str]:
    """For each op of `op_names`, where its first node is: "node N in function F"."""
    found: dict[str, str] = {}
    for where, node in _nodes(graph_def):
        if node.op in op_names and node.op not in found:
            found[node.op] = f"node {node.name!r} in {where}"
    return found


def xla_requirements(graph_def, xla_ops: Iterable[str] | None = None) -> list[str]:
    """What in `graph_def` needs XLA compilation, one line each (empty when nothing does).

    Args:
        graph_def: a `GraphDef` (a MetaGraphDef's `graph_def`), function library included.
        xla_ops: the op names that need XLA; defaults to the packaged `xla_ops.txt`.

    Returns:
        Lines such as "op XlaDynamicUpdateSlice (node 'while/...' in function
        __inference_while_body_42)" and "function __inference_f_8 is marked _XlaMustCompile".
    """
    xla_set = frozenset(xla_ops) if xla_ops is not None else load_xla_ops()
    lines = [
        f"op {op} ({where})"
        for op, where in sorted(
            _op_locations(graph_def, _graph_def_ops(graph_def) & xla_set).items()
        )
    ]
    for fn in graph_def.library.function:
        for attr in XLA_COMPILE_ATTRS:
            if attr in fn.attr and fn.attr[attr].b:
                lines.append(f"function {fn.signature.name} is marked {attr}")
    for where, node in _nodes(graph_def):
        for attr in XLA_COMPILE_ATTRS:
            if attr in node.attr and node.attr[attr].b:
                lines.append(f"node {node.name!r} in {where} is marked {attr}")
    return lines


def _graph_defs(saved_model_dir: str | os.PathLike[str], tags: Iterable[str] = ("serve",)):
    saved_model = _read_saved_model(saved_model_dir)
    wanted = set(tags)
    metas = [
        m
        for m in saved_model.meta_graphs
        if not wanted or wanted.issubset(set(m.meta_info_def.tags))
    ]
    if not metas:
        raise ValueError(
            f"No MetaGraphDef with tags {sorted(wanted)} in {os.fspath(saved_model_dir)!r}"
        )
    return [meta.graph_def for meta in metas]


def graph_ops(
    saved_model_dir: str | os.PathLike[str], tags: Iterable[str] = ("serve",)
) -> set[str]:
    """All op types in the SavedModel's MetaGraphDef(s) tagged ``tags``, function library included.

    Reads ``saved_model.pb`` directly (nothing is loaded or run). With ``tags`` empty, every
    MetaGraphDef is scanned.
    """
    ops: set[str] = set()
    for graph_def in _graph_defs(saved_model_dir, tags):
        ops |= _graph_def_ops(graph_def)
    return ops


def check_serving_ops(
    saved_model_dir: str | os.PathLike[str], allowed: Iterable[str] | None = None
) -> None:
    """Raise ``ValueError`` naming everything a stock TF Serving model server would refuse.

    That is every op outside the allow-list and everything that needs XLA compilation
    (`xla_requirements`), each with the node or function it was found in.
    """
    allowed_set = frozenset(allowed) if allowed is not None else load_allowed_ops()
    xla_set = load_xla_ops()
    path = os.fspath(saved_model_dir)
    problems = []
    for graph_def in _graph_defs(saved_model_dir):
        for line in xla_requirements(graph_def, xla_set):
            problems.append(f"  {line}: needs XLA compilation")
        bad = _graph_def_ops(graph_def) - allowed_set - xla_set
        for op, where in sorted(_op_locations(graph_def, bad).items()):
            hint = _HINTS.get(op, "not in TF core + tensorflow-text ops_lib")
            problems.append(f"  op {op} ({where}): {hint}")
    if not problems:
        return
    raise ValueError(
        f"The SavedModel at {path!r} cannot run on a stock TF Serving model server:\n"
        + "\n".join(problems)
        + "\nTF Serving ships only the ops of TF core and tensorflow-text's ops_lib, and "
        "disables XLA compilation unless started with "
        f"{XLA_FLAG}. Rewrite those parts with ordinary TF / tf-text ops and without "
        "jit_compile before exporting."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.serving.ops",
        description="Check SavedModels against TF Serving's op allow-list.",
    )
    parser.add_argument("paths", nargs="+", help="SavedModel directories")
    parser.add_argument("--allowed_ops_file", default=None, help="override the allow-list file")
    parser.add_argument("--list", action="store_true", help="also list every op in each graph")
    args = parser.parse_args(argv)
    allowed = load_allowed_ops(args.allowed_ops_file)
    status = 0
    for path in args.paths:
        try:
            if args.list:
                sys.stdout.write("\n".join(sorted(graph_ops(path))) + "\n")
            check_serving_ops(path, allowed)
        except (ValueError, FileNotFoundError) as e:
            sys.stderr.write(f"FAIL {path}: {e}\n")
            status = 1
        else:
            sys.stdout.write(f"OK {path}: all ops are served by TF Serving\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
