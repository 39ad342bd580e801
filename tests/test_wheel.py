"""The package as a user gets it: an sdist and a wheel built by ``python -m build``, the wheel
installed into a fresh virtual environment, and the README's quick-start job run from there,
outside the checkout.

Every other test imports mpitune from the source tree (conftest puts it on PYTHONPATH), so a
subpackage that setup.cfg fails to find, or a file the package reads that the wheel leaves out,
passes them all and breaks only for users. This test is the one that would see it.

Dependencies come from the package index that the CI's own install uses (pip's configuration
is left as it is), pinned to the versions installed in the environment running the tests: the
same files CI has just installed, so pip finds them at once, and the wheel is tried against the
versions the rest of the suite was tried against. ``--system-site-packages`` would be faster but
would prove nothing: the checkout's editable install would be importable too. Rebuilding
wheels from installed packages for ``--no-index`` has no reliable tool (mpich's wheel installs
scripts and libraries outside site-packages).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

# What setuptools and the tests leave in a tree (as .gitignore says), and the tree's history.
IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "*.pyc",
    "*.so",
    "*.h5",
    "*.h5.lock",
    ".mpitune-*.tmp",
    ".whl",
)
# The run-time dependencies (setup.cfg's install_requires) and the MPI library of the quick start.
DEPENDENCIES = ("mpi4py", "numpy", "h5py", "mpich")


def clean_env() -> dict:
    """The environment for the installed copy: no PYTHONPATH (the suite's points at the checkout),
    and mpich told not to busy-poll, since there are more ranks than cores here."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
    env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "16")
    env["PIP_NO_INPUT"] = "1"
    return env


def run(cmd: list, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def package_files(root: Path) -> set[str]:
    """Every file of the package in a tree, as a path from the tree's root ('mpitune/...')."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "mpitune").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so")
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The sdist and the wheel, built from a copy of the tree (setuptools writes build/ and
    egg-info into the tree it builds; a copy keeps the checkout as it was). ``python -m build``
    builds the wheel from the unpacked sdist, so a file the sdist lacks is missing from the
    wheel too. Returns (copy of the tree, sdist, wheel)."""
    tmp = tmp_path_factory.mktemp("wheel_build")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=IGNORED)
    run([sys.executable, "-m", "build", "--outdir", tmp / "dist", src], tmp, timeout=240)
    (sdist,) = (tmp / "dist").glob("mpitune-*.tar.gz")
    (wheel,) = (tmp / "dist").glob("mpitune-*.whl")
    return src, sdist, wheel


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(built):
    src, _, wheel = built
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"mpitune", wheel.name.split("-py3")[0] + ".dist-info"}
    missing = package_files(src) - set(names)
    assert not missing, f"in the tree but not in the wheel (setup.cfg packages / package_data): {sorted(missing)}"
    for package in ("mpitune/backends/cupy", "mpitune/scheduling", "mpitune/store"):
        assert f"{package}/__init__.py" in names
    # PEP 561: without it, users' type checkers ignore the package's hints.
    assert "mpitune/py.typed" in names
    entry_points = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-py3')[0]}.dist-info/entry_points.txt")
    assert b"mpitune = mpitune.cli:main" in entry_points


def test_the_sdist_holds_the_package_and_what_the_readme_runs(built):
    src, sdist, _ = built
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    missing = package_files(src) - names
    assert not missing, f"in the tree but not in the sdist: {sorted(missing)}"
    for path in (
        "README.md",
        "setup.cfg",
        "pyproject.toml",
        "examples/matmul_c/spec.py",
        "examples/matmul_c/matmul.c",
        "jobscripts/das6.sh",
        "docs/running.md",
        "tests/conftest.py",
    ):
        assert path in names, path


def test_the_installed_wheel_runs_the_quick_start_outside_the_checkout(built, tmp_path):
    _, sdist, wheel = built
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], tmp_path, timeout=120)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in DEPENDENCIES if _installed(name)]
    (tmp_path / "pins.txt").write_text("\n".join(pins) + "\n")
    run(
        [venv / "bin/python", "-m", "pip", "install", "-q", "-c", tmp_path / "pins.txt", f"{wheel}[mpich]"],
        tmp_path,
        timeout=300,
    )

    # The example as the sdist ships it, in a directory that has nothing to do with the checkout.
    work = tmp_path / "work"
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in ("spec.py", "matmul.c"):
            member = tar.extractfile(f"{top}/examples/matmul_c/{name}")
            work.mkdir(exist_ok=True)
            (work / name).write_bytes(member.read())

    where = run([venv / "bin/python", "-c", "import mpitune; print(mpitune.__file__)"], work, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    job = run([venv / "bin/mpiexec", "-n", "4", venv / "bin/python", "-m", "mpitune", "spec.py"], work, timeout=300)
    header = re.search(
        r"^mpitune: tuning matmul \(C\) on 4 rank\(s\): (\d+) configurations, 0 already in", job.stdout, re.M
    )
    final = re.search(
        r"^mpitune: (\d+) configurations measured in [\d.]+ s \(finished\); results in (.+)$", job.stdout, re.M
    )
    assert header and final, job.stdout
    assert int(final.group(1)) == int(header.group(1)) > 0
    assert Path(final.group(2)) == work / "spec.h5"

    # The console script, and the report's reading of the file.
    report = json.loads(run([venv / "bin/mpitune", "report", "spec.h5", "--json"], work, timeout=60).stdout)
    assert report["configs"] == int(header.group(1)) and report["ok"] > 0, report
    text = run([venv / "bin/python", "-m", "mpitune", "report", "spec.h5"], work, timeout=60).stdout
    assert "kernel matmul (C)" in text and "parallel efficiency" in text, text


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
