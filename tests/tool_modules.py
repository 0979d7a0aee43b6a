"""The repository's `tools/` scripts as modules, for the tests that check them."""

import importlib.util
import os
from types import ModuleType

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def load_tool(name: str) -> ModuleType:
    """`tools/<name>.py`, loaded by path (the tests do not put the repository on sys.path)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
