"""The size rules of CONTRIBUTING.md, checked: no module of the package over 400 lines, no
function (or method, nested ones too) over 80, counted from its ``def`` line to its last line,
docstring included. A module or function past them does more than one job; split it. A module
whose one role is longer says so in a line of its docstring that begins "Longer than 400 lines:"
and why; it is then held to 600, so that a role is not cut to fit the rule."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "mpitune"
MODULE_LINES = 400
DECLARED_LINES = 600  # a module that says why it is longer (``declared_longer``)
FUNCTION_LINES = 80


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(path: Path) -> list[tuple[int, str, int]]:
    """(line, name, length) of each function of ``path`` over ``FUNCTION_LINES`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append((node.lineno, node.name, length))
    return sorted(found)


def test_the_rules_see_the_whole_package():
    names = {p.relative_to(PACKAGE).as_posix() for p in modules()}
    assert {"__init__.py", "store/cache.py", "scheduling/run.py", "backends/cupy/backend.py"} <= names


def declared_longer(path: Path) -> bool:
    """Whether the module's docstring says, in a line of its own, why its role is longer."""
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""
    return any(line.startswith("Longer than 400 lines: ") for line in doc.splitlines())


def test_no_module_is_over_400_lines_unless_it_says_why():
    over = []
    for path in modules():
        lines = len(path.read_text().splitlines())
        if lines > (DECLARED_LINES if declared_longer(path) else MODULE_LINES):
            over.append(f"{path.relative_to(REPO)}: {lines} lines")
    assert not over, f"modules over {MODULE_LINES} lines, or {DECLARED_LINES} where they say why:\n" + "\n".join(over)


def test_a_longer_module_must_say_why(tmp_path):
    plain, declared = tmp_path / "plain.py", tmp_path / "declared.py"
    plain.write_text('"""A module."""\n')
    declared.write_text('"""A module.\n\nLonger than 400 lines: one role.\n"""\n')
    assert not declared_longer(plain) and declared_longer(declared)


def test_no_function_is_over_80_lines():
    over = [
        f"{path.relative_to(REPO)}:{line}: {name} is {length} lines"
        for path in modules()
        for line, name, length in long_functions(path)
    ]
    assert not over, f"functions over {FUNCTION_LINES} lines:\n" + "\n".join(over)


def test_a_function_over_the_limit_is_found(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LINES))
    source = tmp_path / "m.py"
    source.write_text(f"def short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert long_functions(source) == [(6, "long", FUNCTION_LINES + 1)]


FOLDER_MODULES = 15


def test_no_folder_holds_more_than_15_modules():
    """A folder past it holds several rooms' work: give one of them a subpackage."""
    folders = {p.parent for p in modules()}
    over = [
        f"{folder.relative_to(REPO)}: {n} modules"
        for folder in sorted(folders)
        if (n := len(list(folder.glob("*.py")))) > FOLDER_MODULES
    ]
    assert not over, f"folders over {FOLDER_MODULES} modules:\n" + "\n".join(over)
