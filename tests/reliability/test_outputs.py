"""Class 4: an output that is an input is refused, by any path to it. (That outputs appear whole or
not at all is tested on a full disk, in test_disk.py.)"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import kt_cache, mpi_env


def offline(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", *args], cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=60
    )
    return proc, time.monotonic() - started


def one_line(proc: subprocess.CompletedProcess, words: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def imported(tmp_path) -> Path:
    kt_cache(tmp_path / "kt.json")
    proc, _ = offline("import", "kt.json", "--out", "x.h5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "x.h5"


@pytest.mark.parametrize("fmt", ["kt-json", "t4"])
@pytest.mark.parametrize("how", ["same", "dotted", "absolute", "symlink", "hardlink"])
def test_export_onto_its_input_is_refused(tmp_path, imported, fmt, how):
    before = digest(imported)
    if how == "symlink":
        os.symlink(imported, tmp_path / "alias.json")
    elif how == "hardlink":
        os.link(imported, tmp_path / "alias.json")
    out = {"same": "x.h5", "dotted": "./sub/../x.h5", "absolute": str(imported)}.get(how, "alias.json")
    (tmp_path / "sub").mkdir()
    proc, took = offline("export", "x.h5", "--format", fmt, "--out", out, cwd=tmp_path)
    assert proc.returncode == 2
    one_line(proc, "is the input")
    assert took < 10
    assert digest(imported) == before  # not a byte changed
    check, _ = offline("check", "x.h5", "--no-repair", cwd=tmp_path)
    assert check.returncode == 0 and "6 configurations recorded, sound" in check.stdout, check.stdout
