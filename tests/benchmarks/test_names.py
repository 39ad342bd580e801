"""Every name a benchmark script imports from mpitune, or from a sibling script, exists.

Benchmarks run rarely and by hand, so a renamed function breaks them silently; this reads
their imports without running them (most need minutes, a GPU or data the suite lacks)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def _top_level_names(path: Path) -> set[str]:
    """Names a script defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every ``from module import name`` anywhere in the script."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, a.name) for a in node.names)
    return found


def test_there_are_benchmarks_to_check():
    assert len(SCRIPTS) > 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_imported_name_exists(script):
    missing = []
    for module, name in _imports(script):
        sibling = BENCHMARKS / f"{module}.py"
        if sibling.exists():
            if name not in _top_level_names(sibling):
                missing.append(f"{module}.{name}")
        elif module == "mpitune" or module.startswith("mpitune."):
            imported = importlib.import_module(module)
            if not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ModuleNotFoundError:
                    missing.append(f"{module}.{name}")
    assert not missing, f"{script.name} imports names that do not exist: {missing}"
