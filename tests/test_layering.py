"""The layering of docs/architecture.md, checked: every import of every module (function-level
ones too) is read from its syntax tree and held against which room may import what."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "mpitune"

# Each room (a subpackage, or a top-level module) and the rooms it may import; "mpitune" is the
# package itself (its version). A room may always import its own modules.
MAY_IMPORT: dict[str, set[str]] = {
    # The table of exit codes, which every room may import.
    "exits": set(),
    "errors": set(),
    "model": {"errors"},
    "strategies": {"model", "errors"},
    "observers": {"errors"},
    "store": {"model", "errors", "mpitune"},
    # The replay backend answers from measured data, which it reads through the store.
    "backends": {"model", "errors", "observers", "store"},
    "process": {"model", "errors", "backends"},
    # Strategies are asked only for their names; a replay's measured data is read by the caller.
    "spec": {"model", "errors", "backends", "strategies"},
    "scheduling": {"model", "errors", "backends", "process", "store", "strategies", "mpitune"},
    "offline": {"model", "errors", "store", "mpitune"},
    "commands": {"offline", "store", "errors", "model", "mpitune"},
    "analysis": {"offline"},
    # The command line reads a replay's measured data through the store and hands it to the spec.
    "cli": {"spec", "scheduling", "commands", "store", "model", "errors", "mpitune"},
    "__main__": {"cli"},
    # Kernel Tuner's Python interface: checks through the spec, tunes through scheduling (in this
    # process or an MPI job it starts), reads the results file through the store, runs one
    # configuration on a backend.
    "api": {"spec", "scheduling", "store", "offline", "backends", "observers", "model", "errors", "mpitune"},
    # The package re-exports the interface's functions, imported on first use (by name).
    "__init__": {"api"},
}
EVERY_ROOM_MAY_IMPORT = {"exits"}
# Third-party libraries that only one room may import.
ONLY_IN = {
    "mpi4py": "scheduling",
    "cupy": "backends",
    "cupy_backends": "backends",
    "cupyx": "backends",
    "h5py": "store",
    "pynvml": "observers",
    "pandas": "offline",
    "matplotlib": "offline",
}


def room_of(path: Path, package: Path) -> str:
    parts = path.relative_to(package).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def rooms(package: Path = PACKAGE) -> set[str]:
    return {room_of(p, package) for p in package.rglob("*.py")}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import; ``from mpitune import x`` counts as mpitune.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; imports are absolute"
            if node.module == "mpitune":
                found += [(node.lineno, f"mpitune.{alias.name}") for alias in node.names]
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def violations(package: Path = PACKAGE) -> list[str]:
    known = rooms(package)
    wrong = []
    for path in sorted(package.rglob("*.py")):
        room = room_of(path, package)
        for line, module in imported(path):
            where = f"{path.relative_to(package.parent)}:{line}"
            top = module.split(".")[0]
            if top in ONLY_IN and ONLY_IN[top] != room:
                wrong.append(f"{where}: {module} may be imported only in {ONLY_IN[top]}/, not in {room}")
            if top != "mpitune":
                continue
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 and parts[1] in known else "mpitune"
            if target != room and target not in MAY_IMPORT[room] | EVERY_ROOM_MAY_IMPORT:
                wrong.append(f"{where}: {room} may not import {module}")
    return wrong


def test_every_room_has_a_rule():
    assert rooms() <= set(MAY_IMPORT), sorted(rooms() - set(MAY_IMPORT))


def test_no_room_imports_what_the_architecture_forbids():
    assert violations() == []


def _copy_of_package(tmp_path: Path) -> Path:
    copy = tmp_path / "mpitune"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return copy


@pytest.mark.parametrize(
    "room, line, expected",
    [
        ("model", "import h5py", "h5py may be imported only in store/"),
        ("strategies", "from mpitune.store.cache import Cache", "strategies may not import mpitune.store.cache"),
        ("offline", "    from mpi4py import MPI", "mpi4py may be imported only in scheduling/"),
        ("spec", "from mpitune import scheduling", "spec may not import mpitune.scheduling"),
        ("offline", "from mpitune.scheduling.faults import ending", "offline may not import mpitune.scheduling"),
    ],
)
def test_the_check_catches_a_forbidden_import(tmp_path, room, line, expected):
    """The rule table is only worth something if a breach fails: plant one in a copy."""
    copy = _copy_of_package(tmp_path)
    planted = copy / room / "planted.py"
    planted.write_text(f"def f():\n{line if line.startswith(' ') else '    ' + line}\n")
    found = violations(copy)
    assert any(expected in v for v in found), found


def test_the_table_of_exit_codes_imports_nothing_of_the_package(tmp_path):
    copy = _copy_of_package(tmp_path)
    (copy / "exits.py").write_text((PACKAGE / "exits.py").read_text() + "\nfrom mpitune.errors import UserError\n")
    assert any("exits may not import mpitune.errors" in v for v in violations(copy))


def test_the_faults_room_is_part_of_scheduling_and_its_heartbeat_imports_mpi4py():
    """Fault handling lives in ``scheduling/faults/``: inside scheduling, so that the heartbeat
    and the abort may use MPI there and nowhere else."""
    heartbeat = PACKAGE / "scheduling" / "faults" / "heartbeat.py"
    assert room_of(heartbeat, PACKAGE) == "scheduling"
    assert any(module == "mpi4py" for _, module in imported(heartbeat))
