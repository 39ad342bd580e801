"""One table of exit codes (mpitune/exits.py): the docs show it, the package and the job scripts
name no code of their own."""

from __future__ import annotations

import ast
import re

from conftest import REPO

from mpitune.exits import ExitCode

# Calls that end a process, a job or a command with the code of their first argument.
_ENDING = {"exit", "_exit", "Abort", "abort_job"}


def test_the_docs_table_is_the_enum():
    text = (REPO / "docs" / "reliability.md").read_text()
    section = text[text.index("## Exit codes") :].split("\n## ")[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (.+) \|$", section, re.M)
    expected = [(str(code.value), code.name, code.meaning) for code in ExitCode]
    assert rows == expected, "\n".join(f"| {c} | `{n}` | {m} |" for c, n, m in expected)


def test_the_codes_are_what_shells_and_batch_systems_read():
    assert (ExitCode.OK, ExitCode.USER_ERROR, ExitCode.CANNOT_WRITE, ExitCode.RESUMABLE) == (0, 2, 74, 75)
    assert (ExitCode.INTERRUPTED, ExitCode.CLOSED_PIPE) == (128 + 2, 128 + 13)  # SIGINT, SIGPIPE
    assert all(code.meaning and "\n" not in code.meaning and "|" not in code.meaning for code in ExitCode)


def test_no_module_ends_with_a_number_of_its_own():
    found = []
    for path in sorted((REPO / "mpitune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _ENDING and isinstance(node.args[0].value, int):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}({node.args[0].value})")
    assert found == []


def test_the_job_scripts_leave_the_exit_code_to_the_job_verb():
    """The scripts exec ``mpitune job``, which requeues on ``ExitCode.RESUMABLE``; a script that
    tested a code itself would hold a second copy of the table."""
    for script in sorted((REPO / "jobscripts").glob("*.sh")):
        text = script.read_text()
        if "mpitune job" not in text:
            continue  # not a job script (the local cluster's set-up)
        assert text.rstrip().endswith('exec python3 -m mpitune job "$@"'), script
        assert not re.search(r"\$\?|-eq\s+\d|==\s*\d|\b75\b", text), script
