"""The layering of docs/architecture.md, checked: every import of every module (function-level
ones too) is read from its syntax tree and held against which room may import what."""

from __future__ import annotations

import ast
import re
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
    "model": set(),
    "strategies": {"model"},
    "observers": {"errors"},
    "store": {"model", "errors"},
    # The replay backend answers from measured data, which it reads through the store.
    "backends": {"model", "errors", "observers", "store"},
    "process": {"model", "errors", "backends"},
    # Strategies are asked only for their names; a replay's measured data is read by the caller.
    "spec": {"model", "errors", "backends", "strategies"},
    "scheduling": {"model", "errors", "backends", "process", "store", "strategies", "mpitune"},
    "offline": {"model", "errors", "store", "mpitune"},
    "commands": {"offline", "store", "errors"},
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
    "plotly": "offline",
}
# Imported by name at run time (importlib), which the syntax tree does not show.
BY_NAME = {"__init__": {"api"}}
DOCS = REPO / "docs" / "architecture.md"


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


def used(package: Path = PACKAGE) -> dict[str, set[str]]:
    """The rooms each room does import (its own and ``EVERY_ROOM_MAY_IMPORT`` aside)."""
    known = rooms(package)
    found: dict[str, set[str]] = {room: set() for room in known}
    for path in package.rglob("*.py"):
        room = room_of(path, package)
        for _, module in imported(path):
            parts = module.split(".")
            if parts[0] == "mpitune":
                target = parts[1] if len(parts) > 1 and parts[1] in known else "mpitune"
                found[room].add(target)
    return {room: targets - {room} - EVERY_ROOM_MAY_IMPORT for room, targets in found.items()}


def documented(text: str | None = None) -> tuple[dict[str, set[str]], dict[str, str]]:
    """docs/architecture.md's two tables: each room's "may import" column, and each library's room."""
    rooms_table: dict[str, set[str]] = {}
    libraries: dict[str, str] = {}
    for line in (DOCS.read_text() if text is None else text).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].count("/") == 1:
            room = cells[0].strip("`/")
            rooms_table[room] = {name for name in re.findall(r"`(\w+)`", cells[2])} if cells[2] != "—" else set()
        elif len(cells) == 2 and cells[1].startswith("`"):
            for library in cells[0].split(", "):
                libraries[library] = re.match(r"`(\w+)/`", cells[1]).group(1)  # type: ignore[union-attr]
    return rooms_table, libraries


def test_the_architecture_table_is_the_rule_table():
    """Each room's row in docs/architecture.md names exactly what the rules let it import, and
    each library the room the rules keep it in: the page cannot drift from what is checked."""
    rooms_table, libraries = documented()
    subpackages = {room for room in MAY_IMPORT if (PACKAGE / room).is_dir()}
    assert set(rooms_table) == subpackages
    assert {room: MAY_IMPORT[room] for room in rooms_table} == rooms_table
    assert libraries == ONLY_IN


def test_a_drifted_row_is_seen():
    text = DOCS.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `commands/` |"))
    drifted = text.replace(row, row.replace("`offline`, `store`, `errors`", "`offline`, `store`, `errors`, `model`"))
    rooms_table, libraries = documented(drifted)
    assert rooms_table["commands"] == MAY_IMPORT["commands"] | {"model"} and libraries == ONLY_IN


def test_every_rule_is_used():
    """A rule that lets a room import what it never does is a layer the table only claims."""
    found = used()
    unused = {room: sorted(MAY_IMPORT[room] - found.get(room, set()) - BY_NAME.get(room, set())) for room in MAY_IMPORT}
    assert {room: names for room, names in unused.items() if names} == {}


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
