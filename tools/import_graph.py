"""The import graph of `keras_transformer`: its cycles and its upward imports.

Run from the repository root (exits 1 when there is a cycle, an upward import or a module
`LAYERS` does not place)::

    python -m tools.import_graph

`tests/test_imports.py` asserts the same. The graph is read from the AST of every module, so
nothing is imported: each `import` / `from ... import` statement, at module level or inside a
function, is an edge. `from keras_transformer.x import y` goes to `keras_transformer.x.y` when
that is a module and to `keras_transformer.x` otherwise (likewise `from keras_transformer
import x`). Package `__init__` modules are nodes like any other (an eager re-export is an
import), but they are exempt from the layer rule: they only gather what their package holds.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Mapping, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "keras_transformer"

# The layers of the package, bottom to top; a module may import its own layer and any lower
# one. Each entry is a module path relative to the package, covering that module and what
# lies under it; the longest entry that matches a module decides its layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "constants",
            "validation",
            "compat",
            "storage",
            "masks",
            "packing",
            "model_config",
            "onednn",
            "hardware",
        ),
    ),
    ("layers", ("layers",)),
    ("models", ("models", "quantization")),
    ("configuration", ("config",)),
    ("text and data", ("tokenization", "data", "decoding", "evaluation", "run_dir")),
    ("prediction", ("predictors",)),
    ("training", ("training",)),
    ("tasks", ("tasks",)),
    # serving.ops (TF Serving's op allow-list) is what an export is checked against.
    ("one path", ("runner", "export", "ctranslate2_export", "serving.ops")),
    ("entry points", ("commands", "cli", "serving", "plotting")),
)

Graph = Mapping[str, Mapping[str, int]]


def module_files(package_dir: str, package: str) -> dict[str, str]:
    """Every module of the package under `package_dir`, dotted name -> file path."""
    modules = {}
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            parts = [package, *os.path.relpath(path, package_dir)[: -len(".py")].split(os.sep)]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterable[tuple[str, str | None]]:
    """(module, name imported from it or None) of each import of an import statement."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
            base = ".".join([*parts, base] if base else parts)
        for alias in node.names:
            yield base, alias.name


def module_graph(package_dir: str | None = None, package: str = PACKAGE) -> dict[str, dict]:
    """module -> {module of the package it imports: line of the first such import}."""
    modules = module_files(package_dir or os.path.join(REPO, package), package)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            for base, name in _imported(node, module, path.endswith("__init__.py")):
                if base != package and not base.startswith(package + "."):
                    continue
                target = f"{base}.{name}" if f"{base}.{name}" in modules else base
                if target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def layer_of(module: str, layers: Sequence = LAYERS, package: str = PACKAGE) -> int | None:
    """The index in `layers` of the layer of `module`, or None when no entry matches."""
    relative = module[len(package) + 1 :] if module.startswith(package + ".") else ""
    best, best_length = None, -1
    for number, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            matches = relative == prefix or relative.startswith(prefix + ".")
            if matches and len(prefix) > best_length:
                best, best_length = number, len(prefix)
    return best


def unplaced_modules(
    graph: Graph, layers: Sequence = LAYERS, package: str = PACKAGE, exempt: Iterable[str] = ()
) -> list[str]:
    """The modules not in `exempt` that no entry of `layers` places."""
    exempt = set(exempt)
    return sorted(
        module
        for module in graph
        if module not in exempt and layer_of(module, layers, package) is None
    )


def upward_imports(
    graph: Graph,
    layers: Sequence = LAYERS,
    package: str = PACKAGE,
    exempt: Iterable[str] = (),
) -> list[str]:
    """Each import of a module from a higher layer, as `importer:line imports module
    (layer 'a' above layer 'b')`. Modules in `exempt` and unplaced ones are skipped."""
    exempt = set(exempt)
    found = []
    for module in sorted(graph):
        own = layer_of(module, layers, package)
        if module in exempt or own is None:
            continue
        for target, line in sorted(graph[module].items()):
            theirs = layer_of(target, layers, package)
            if theirs is not None and theirs > own and target not in exempt:
                found.append(
                    f"{module.replace('.', '/')}.py:{line} imports {target} "
                    f"(layer '{layers[theirs][0]}' above layer '{layers[own][0]}')"
                )
    return found


def package_inits(package_dir: str | None = None, package: str = PACKAGE) -> set[str]:
    """The package `__init__` modules, exempt from the layer rule."""
    files = module_files(package_dir or os.path.join(REPO, package), package)
    return {module for module, path in files.items() if path.endswith("__init__.py")}


def line_count(package_dir: str | None = None, package: str = PACKAGE) -> tuple[int, int]:
    """(lines, modules) of the package's `.py` files."""
    files = module_files(package_dir or os.path.join(REPO, package), package)
    lines = 0
    for path in files.values():
        with open(path, encoding="utf-8") as f:
            lines += sum(1 for _ in f)
    return lines, len(files)


def main() -> int:
    graph = module_graph()
    inits = package_inits()
    found_cycles = cycles(graph)
    upward = upward_imports(graph, exempt=inits)
    unplaced = unplaced_modules(graph, exempt=inits)
    out = sys.stdout
    out.write(f"Import cycles: {len(found_cycles)}\n")
    for component in found_cycles:
        out.write("  " + " <-> ".join(component) + "\n")
    out.write(f"Upward imports: {len(upward)}\n")
    for line in upward:
        out.write(f"  {line}\n")
    if unplaced:
        out.write(f"Modules no layer places (add them to LAYERS): {', '.join(unplaced)}\n")
    lines, modules = line_count()
    out.write(f"{PACKAGE}: {lines} lines in {modules} modules\n")
    return 1 if found_cycles or upward or unplaced else 0


if __name__ == "__main__":
    sys.exit(main())
