"""Strategies know no MPI, devices, HDF5, files or clocks: what they may import is a short list,
so a search is a pure function of the seed and the results told, and runs anywhere."""

import ast
from pathlib import Path

import pytest

import mpitune.strategies

ALLOWED = {
    "__future__",
    "abc",
    "collections",
    "contextlib",
    "dataclasses",
    "functools",
    "heapq",
    "importlib",
    "math",
    "types",
    "typing",
    "numpy",
    "threadpoolctl",
    "mpitune.model.judging.pareto",  # numpy only: dominance and crowding, for nsga2
    "mpitune.model.prior",  # numpy only: times measured elsewhere, on this space's ids
    "mpitune.model.result",
    "mpitune.model.searchspace",
    "mpitune.strategies",
}
PACKAGE = Path(mpitune.strategies.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def allowed(name: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_a_strategy_module_imports_only_pure_computation(path):
    assert not {name for name in imported(path) if not allowed(name)}


def test_the_check_sees_a_forbidden_import():
    assert not allowed("mpi4py") and not allowed("time") and not allowed("os.path") and not allowed("mpitune.store")
    assert "numpy" in imported(PACKAGE / "geometry.py")
