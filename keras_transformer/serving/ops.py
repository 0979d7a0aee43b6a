"""Check that every op in an exported SavedModel is one TF Serving's model server ships.

The allow-list (``allowed_ops.txt`` beside this module) holds TF core ops plus the ops of
tensorflow-text's ``ops_lib`` target, which TF Serving links; its header says how it was
derived. A graph with any other op (``tf.py_function``'s ``EagerPyFunc``, a custom op from
another library, ...) loads in Python but fails in ``tensorflow_model_server`` with
"Op type not registered".

Usage::

    python -m keras_transformer.serving.ops EXPORT_DIR [EXPORT_DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from importlib import resources

ALLOWED_OPS_FILE = "allowed_ops.txt"

_HINTS = {
    "EagerPyFunc": "tf.py_function runs Python code, which the C++ model server does not have",
    "PyFunc": "tf.numpy_function / tf.compat.v1.py_func runs Python code",
    "PyFuncStateless": "tf.numpy_function(stateful=False) runs Python code",
}


def load_allowed_ops(path: str | os.PathLike[str] | None = None) -> frozenset[str]:
    """The allow-list: one op name per line; ``#`` comments and blank lines are skipped."""
    if path is None:
        text = resources.files(__package__).joinpath(ALLOWED_OPS_FILE).read_text("utf-8")
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def _read_saved_model(saved_model_dir: str | os.PathLike[str]):
    from tensorflow.core.protobuf import saved_model_pb2

    pb_path = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    if not os.path.isfile(pb_path):
        raise FileNotFoundError(f"No saved_model.pb in {os.fspath(saved_model_dir)!r}")
    saved_model = saved_model_pb2.SavedModel()
    with open(pb_path, "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def _graph_def_ops(graph_def) -> set[str]:
    functions = {fn.signature.name for fn in graph_def.library.function}
    ops = {node.op for node in graph_def.node}
    for fn in graph_def.library.function:
        ops.update(node.op for node in fn.node_def)
    # A node may call a library function directly by name; that is not an op type.
    return ops - functions


def graph_ops(
    saved_model_dir: str | os.PathLike[str], tags: Iterable[str] = ("serve",)
) -> set[str]:
    """All op types in the SavedModel's MetaGraphDef(s) tagged ``tags``, function library included.

    Reads ``saved_model.pb`` directly (nothing is loaded or run). With ``tags`` empty, every
    MetaGraphDef is scanned.
    """
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
    ops: set[str] = set()
    for meta in metas:
        ops |= _graph_def_ops(meta.graph_def)
    return ops


def disallowed_ops(
    saved_model_dir: str | os.PathLike[str], allowed: Iterable[str] | None = None
) -> set[str]:
    """The ops of ``graph_ops(saved_model_dir)`` that are not in the allow-list."""
    allowed_set = frozenset(allowed) if allowed is not None else load_allowed_ops()
    return graph_ops(saved_model_dir) - allowed_set


def check_serving_ops(
    saved_model_dir: str | os.PathLike[str], allowed: Iterable[str] | None = None
) -> None:
    """Raise ``ValueError`` naming every op TF Serving's model server would not have."""
    bad = disallowed_ops(saved_model_dir, allowed)
    if not bad:
        return
    details = []
    for op in sorted(bad):
        hint = _HINTS.get(op)
        details.append(f"  {op}" + (f" ({hint})" if hint else ""))
    raise ValueError(
        f"The SavedModel at {os.fspath(saved_model_dir)!r} uses {len(bad)} op(s) that TF "
        "Serving's model server does not ship (TF core + tensorflow-text ops_lib):\n"
        + "\n".join(details)
        + "\nRewrite those parts with TF / tf-text ops before exporting."
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
