"""The files around the package that must agree with each other: the version and the changelog,
the pre-commit hooks and setup.cfg's pins, CI's script and the README's test command. Each pair
is written by hand in two places; these tests are what keeps them one definition."""

from __future__ import annotations

import configparser
import re

from conftest import REPO

import mpitune


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "setup.cfg")
    return config


def requirements(text: str) -> list[str]:
    """A setup.cfg list of requirements, one a line (configparser drops the comment lines)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def pre_commit_hooks() -> dict[str, dict]:
    """Each repository of .pre-commit-config.yaml (by its last path part) with its ``rev`` and
    the ``additional_dependencies`` of its hooks: the plain block layout the file uses, read
    without a YAML parser."""
    text = (REPO / ".pre-commit-config.yaml").read_text()
    repos = {}
    for block in re.split(r"^  - repo: ", text, flags=re.M)[1:]:
        url = block.split()[0]
        rev = re.search(r"^    rev: (\S+)$", block, re.M)
        deps = re.search(r"^        additional_dependencies:\n((?:          - \S+\n)+)", block, re.M)
        repos[url.rsplit("/", 1)[1]] = {
            "rev": rev.group(1) if rev else None,
            "deps": re.findall(r"- (\S+)", deps.group(1)) if deps else [],
        }
    return repos


def test_the_pre_commit_hooks_run_the_ruff_and_mypy_that_setup_cfg_pins():
    pins = dict(req.split("==") for req in requirements(setup_cfg()["options.extras_require"]["lint"]))
    assert set(pins) == {"ruff", "mypy"}, pins
    hooks = pre_commit_hooks()
    assert hooks["ruff-pre-commit"]["rev"] == f"v{pins['ruff']}", (hooks, pins)
    assert hooks["mirrors-mypy"]["rev"] == f"v{pins['mypy']}", (hooks, pins)


def test_the_pre_commit_mypy_sees_the_dependencies_ci_installs_for_it():
    # CI's mypy runs where the package's dependencies are installed: their type hints (numpy's,
    # mpi4py's) change what it finds, so pre-commit's isolated mypy gets the same ones.
    install_requires = requirements(setup_cfg()["options"]["install_requires"])
    assert sorted(pre_commit_hooks()["mirrors-mypy"]["deps"]) == sorted(install_requires)


def changelog_versions() -> list[tuple[int, ...]]:
    text = (REPO / "CHANGELOG.md").read_text()
    return [tuple(map(int, v.split("."))) for v in re.findall(r"^## (\d+\.\d+\.\d+)\b", text, re.M)]


def test_the_version_is_the_newest_of_the_changelog():
    versions = changelog_versions()
    assert versions, "CHANGELOG.md: no '## X.Y.Z' heading"
    assert versions == sorted(set(versions), reverse=True), f"CHANGELOG.md: versions not newest first: {versions}"
    newest = ".".join(map(str, versions[0]))
    assert mpitune.__version__ == newest, (
        f"mpitune/__init__.py says {mpitune.__version__}, CHANGELOG.md's newest entry is {newest}"
    )


def readme_test_command() -> str:
    """The README's command that installs the test dependencies and runs the suite."""
    text = (REPO / "README.md").read_text()
    (command,) = [line.strip() for line in text.splitlines() if line.startswith("    ") and "-m pytest" in line]
    return command


def extras(command: str) -> set[str]:
    return {e for found in re.findall(r"-e '\.\[([\w,]+)\]'", command) for e in found.split(",")}


def test_ci_makes_one_environment_and_runs_the_readme_test_command_verbatim_last():
    lines = [line for line in (REPO / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    command = readme_test_command()
    assert lines[-1] == command, f".ci/run must end with the README's test command: {command}"
    installs = [i for i, line in enumerate(lines[:-1]) if "pip install" in line]
    assert len(installs) == 1, [lines[i] for i in installs]
    (first,) = installs
    assert lines[first].startswith("python3 -m venv .venv && .venv/bin/pip install "), lines[first]
    # One install of everything, before the guard rails: the README's install finds it all there.
    assert extras(lines[first]) >= extras(command) | {"lint"}, lines[first]
    checks = [i for i, line in enumerate(lines) if line.startswith((".venv/bin/ruff", ".venv/bin/mypy"))]
    assert len(checks) == 3 and first < min(checks) and max(checks) < len(lines) - 1, lines
