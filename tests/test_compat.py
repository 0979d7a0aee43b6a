"""`keras_transformer.compat`: every private API the package uses exists in the installed
Keras, TensorFlow and tensorflow-text, and no other module uses one (no import, no private
attribute of their objects)."""

import ast
import os
import re

import keras
import pytest
import tensorflow_text as tf_text

from keras_transformer import compat

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "keras_transformer")
PRIVATE_IMPORT = re.compile(
    r"^\s*(from|import)\s+(keras\.src|tensorflow\.python|tensorflow_text\.python)"
)


def test_every_private_symbol_exists(tmp_path):
    compat.check_private_apis()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    instances = {
        "Model": model,
        "callbacks.BackupAndRestore": keras.callbacks.BackupAndRestore(str(tmp_path)),
    }
    for path in compat._INSTANCE_ATTRIBUTES:
        owner, attribute = path.rsplit(".", 1)
        if owner == "SentencepieceTokenizer":  # set in __init__, which needs a model
            assert attribute in tf_text.SentencepieceTokenizer.__init__.__code__.co_names
        else:
            assert hasattr(instances[owner], attribute), path


def test_a_missing_symbol_is_named(monkeypatch):
    monkeypatch.setattr(
        compat, "PRIVATE_SYMBOLS", (*compat.PRIVATE_SYMBOLS, ("keras", "Model._gone_in_keras_4"))
    )
    with pytest.raises(ImportError, match=r"`keras\.Model\._gone_in_keras_4`.*keras 3\.15"):
        compat.check_private_apis()


def test_no_other_module_imports_private_apis():
    offenders = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or os.path.samefile(path, compat.__file__):
                continue
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if PRIVATE_IMPORT.match(line):
                        offenders.append(f"{os.path.relpath(path, PACKAGE)}:{number}")
    assert offenders == [], offenders


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_trees() -> dict[str, ast.Module]:
    """The AST of every module of the package but compat.py, by path relative to it."""
    trees = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".py") and not os.path.samefile(path, compat.__file__):
                with open(path, encoding="utf-8") as f:
                    trees[os.path.relpath(path, PACKAGE)] = ast.parse(f.read(), path)
    return trees


def _own_private_names(trees: dict[str, ast.Module]) -> set[str]:
    """The private names the package defines: `self._x` / `cls._x` assigned, functions,
    methods and classes named `_x`, module- or class-level `_x` assigned or imported."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return {name for name in names if _is_private(name)}


def _private_uses(tree: ast.Module, own: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each use of a private name the package does not define: `x._name`,
    `getattr(x, "_name")` (and `hasattr`, `setattr`, `delattr`), `... == "_Name"`."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            uses.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
        ):
            uses.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Constant) and re.fullmatch(r"_\w+", str(operand.value)):
                    uses.append((node.lineno, operand.value))
    return [
        (line, name)
        for line, name in uses
        if isinstance(name, str) and _is_private(name) and name not in own
    ]


def test_no_other_module_uses_private_attributes():
    trees = _package_trees()
    own = _own_private_names(trees)
    offenders = [
        f"keras_transformer/{path}:{line} uses `{name}`"
        for path, tree in sorted(trees.items())
        for line, name in sorted(_private_uses(tree, own))
    ]
    assert offenders == [], (
        "Private attributes of objects that are not ours go through "
        "keras_transformer/compat.py:\n" + "\n".join(offenders)
    )


def test_the_private_attribute_check_sees_each_form():
    tree = ast.parse(
        "model._distribute_strategy\n"
        "getattr(model, '_trainable_state', None)\n"
        "type(s).__name__ != '_DefaultDistributionStrategy'\n"
        "self._ours, type(self).__name__, obj.public\n"
    )
    assert _private_uses(tree, own={"_ours"}) == [
        (1, "_distribute_strategy"),
        (2, "_trainable_state"),
        (3, "_DefaultDistributionStrategy"),
    ]


def test_in_xla_context_is_true_only_inside_a_function_that_xla_compiles():
    import tensorflow as tf

    seen = {}

    def record(name):
        seen[name] = compat.in_xla_context()
        return tf.constant(0.0)

    tf.function(lambda: record("xla"), jit_compile=True)()
    tf.function(lambda: record("graph"))()
    record("eager")
    tf.function(lambda: tf.function(lambda: record("nested"))(), jit_compile=True)()
    assert seen == {"xla": True, "graph": False, "eager": False, "nested": True}
