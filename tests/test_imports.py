"""The package's import graph has no cycles and no upward imports (`tools/import_graph.py`
holds the layer table and the graph; `python -m tools.import_graph` prints the same)."""

import textwrap

from tool_modules import load_tool

import_graph = load_tool("import_graph")


def test_no_import_cycles():
    found = import_graph.cycles(import_graph.module_graph())
    assert found == [], "Modules that import each other (directly or through others):\n" + (
        "\n".join(" <-> ".join(component) for component in found)
    )


def test_no_upward_imports():
    graph = import_graph.module_graph()
    found = import_graph.upward_imports(graph, exempt=import_graph.package_inits())
    assert found == [], (
        "Imports of a higher layer (tools/import_graph.py's LAYERS, bottom to top):\n"
        + "\n".join(found)
    )


def test_every_module_has_a_layer():
    graph = import_graph.module_graph()
    unplaced = import_graph.unplaced_modules(graph, exempt=import_graph.package_inits())
    assert unplaced == [], f"Add these modules to LAYERS in tools/import_graph.py: {unplaced}"


def test_each_prefix_is_in_one_layer():
    prefixes = [prefix for _, layer in import_graph.LAYERS for prefix in layer]
    assert sorted(prefixes) == sorted(set(prefixes))


def test_cycles_are_the_components_of_more_than_one_module():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"d": 1}}
    assert import_graph.cycles(graph) == [["a", "b", "c"]]
    graph = {"a": {"b": 1}, "b": {"a": 1}, "c": {"d": 1}, "d": {"c": 1}, "x": {"a": 1, "c": 1}}
    assert import_graph.cycles(graph) == [["a", "b"], ["c", "d"]]
    assert import_graph.cycles({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) == []


def test_cycles_of_a_long_chain_need_no_recursion():
    n = 5000
    graph = {str(i): {str(i + 1): 1} for i in range(n)}
    graph[str(n)] = {"0": 1}
    assert import_graph.cycles(graph) == [sorted(graph)]


def _write(root, files):
    for path, text in files.items():
        path = root / path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_graph_resolves_every_form_of_import(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.low import VALUE\n",
            "pkg/low.py": "VALUE = 1\n\n\ndef late():\n    import pkg.high\n",
            "pkg/sub/__init__.py": "NAME = 1\n",
            "pkg/sub/leaf.py": "from . import NAME\nimport os\n",
            "pkg/high.py": """\
                from pkg.sub import leaf
                from pkg import low


                def f():
                    from pkg.sub import NAME
                    from .sub.leaf import os
                """,
        },
    )
    graph = import_graph.module_graph(str(tmp_path / "pkg"), "pkg")
    assert graph == {
        "pkg": {"pkg.low": 1},
        "pkg.high": {"pkg.sub.leaf": 1, "pkg.low": 2, "pkg.sub": 6},
        "pkg.low": {"pkg.high": 5},
        "pkg.sub": {},
        "pkg.sub.leaf": {"pkg.sub": 1},
    }
    layers = (("bottom", ("low", "sub")), ("top", ("high",)))
    exempt = import_graph.package_inits(str(tmp_path / "pkg"), "pkg")
    assert exempt == {"pkg", "pkg.sub"}
    assert import_graph.upward_imports(graph, layers, "pkg", exempt) == [
        "pkg/low.py:5 imports pkg.high (layer 'top' above layer 'bottom')"
    ]
    assert import_graph.cycles(graph) == [["pkg.high", "pkg.low"]]
    assert import_graph.unplaced_modules(graph, (("top", ("high",)),), "pkg", exempt) == [
        "pkg.low",
        "pkg.sub.leaf",
    ]
