"""The Manager's state is its own: no module outside manager.py assigns one of its attributes.

Other modules read its fields and change them through its methods (``request_stop``,
``hand_out``, ``write``, ...), each of which says which thread may call it. This test reads
every module of the package and the benchmarks, finds the attributes the Manager sets on
itself, and fails on an assignment to one of them through anything named like a Manager.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mpitune

PACKAGE = Path(mpitune.__file__).parent
MANAGER = PACKAGE / "scheduling" / "manager.py"
ROOTS = (PACKAGE, PACKAGE.parent / "benchmarks")


def manager_attributes() -> set[str]:
    """Every attribute manager.py assigns on ``self``."""
    names = set()
    for node in ast.walk(ast.parse(MANAGER.read_text())):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                names.add(target.attr)
    return names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _holder(expr: ast.expr) -> str:
    """The name an attribute is reached through: ``manager`` for ``self.rank0.manager.x``."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


def outside_assignments(attributes: set[str]) -> list[str]:
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            if path == MANAGER:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                for target in _targets(node):
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr in attributes
                        and "manager" in _holder(target.value).lower()
                    ):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(target)}")
    return found


def test_the_manager_sets_its_own_state():
    attributes = manager_attributes()
    assert {"stop_requested", "stop_reason", "in_flight", "handed_out", "batch", "measured"} <= attributes
    assert outside_assignments(attributes) == []


def test_the_check_finds_an_assignment_from_outside(tmp_path, monkeypatch):
    planted = tmp_path / "planted.py"
    planted.write_text("def stop(rank0):\n    rank0.manager.stop_requested = None\n")
    monkeypatch.setattr(__import__(__name__), "ROOTS", (tmp_path,))
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "pkg")
    assert outside_assignments({"stop_requested"}) == ["planted.py:2: rank0.manager.stop_requested"]
