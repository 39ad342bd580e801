"""Hostile files: a real cache with flipped bytes or cut short. ``check``, ``report`` and a resume
never hang and never print a traceback; a file found damaged is left exactly as it was; and a
file ``check`` calls sound is one that ``report`` reads."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import mpi_env, mpitune

FLIPS, CUTS, BYTES_FLIPPED = 10, 4, 20
SECONDS = 30  # per call: a hang fails the test instead of stalling it


def write_measured(path: Path) -> Path:
    """A Kernel Tuner cache of 40 configurations that all ran (replayed, they take simulated time)."""
    entries = {
        f"{x},{y}": {
            "x": x,
            "y": y,
            "time": 100.0 / (x * y),
            "times": [100.0 / (x * y)] * 3,
            "compile_time": 400.0,
            "verification_time": 0.0,
            "benchmark_time": 100.0,
        }
        for x in range(1, 9)
        for y in range(1, 6)
    }
    path.write_text(
        json.dumps(
            {
                "device_name": "Test GPU",
                "kernel_name": "k",
                "problem_size": [64],
                "tune_params_keys": ["x", "y"],
                "tune_params": {"x": list(range(1, 9)), "y": list(range(1, 6))},
                "objective": "time",
                "cache": entries,
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path]:
    """A cache file from a quick real run (a replay of 40 configurations), and its source."""
    tmp = tmp_path_factory.mktemp("damage")
    source = write_measured(tmp / "measured.json")
    out = tmp / "out.h5"
    proc = mpitune(1, ["replay", str(source), "--output", str(out), "--seed", "1", "--max-fevals", "24"], tmp)
    assert proc.returncode == 0, proc.stderr
    return source, out


def damaged_copies(made_file: Path, where: Path) -> list[Path]:
    rng = np.random.default_rng(15)
    data = made_file.read_bytes()
    copies = []
    for case in range(FLIPS):
        flipped = bytearray(data)
        for at in rng.choice(len(data), BYTES_FLIPPED, replace=False):
            flipped[at] ^= int(rng.integers(1, 256))
        copies.append(where / f"flipped{case}.h5")
        copies[-1].write_bytes(bytes(flipped))
    for case, fraction in enumerate(np.linspace(0.2, 0.95, CUTS)):
        copies.append(where / f"cut{case}.h5")
        copies[-1].write_bytes(data[: int(len(data) * fraction)])
    return copies


def call(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "mpitune", *args],
            cwd=cwd,
            env=mpi_env(),
            capture_output=True,
            text=True,
            timeout=SECONDS,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"mpitune {' '.join(args)} hung for {SECONDS} s")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_damage_is_answered_in_one_line_and_never_changes_the_file(made, tmp_path):
    source, made_file = made
    detected = 0
    for path in damaged_copies(made_file, tmp_path):
        before = digest(path)
        check = call(["check", str(path)], tmp_path)
        report = call(["report", str(path), "--json"], tmp_path)
        resume = call(["replay", str(source), "--output", str(path), "--seed", "1"], tmp_path)
        for proc in (check, report, resume):
            assert "Traceback" not in proc.stdout + proc.stderr, (path.name, proc.args, proc.stderr)
            assert proc.returncode in (0, 1, 2), (path.name, proc.args, proc.stderr)
        if check.returncode == 2:
            detected += 1
            assert report.returncode == 2 and resume.returncode == 2, (path.name, report.stderr, resume.stderr)
            assert len(resume.stderr.strip().splitlines()) == 1 and "damaged" in resume.stderr + report.stderr
            assert digest(path) == before, f"{path.name} was changed"
        else:  # flips that fell where nothing is read (free space): the file is sound and readable
            assert report.returncode == 0, (path.name, check.stdout, report.stderr)
    assert detected >= FLIPS + CUTS - 3


def test_salvage_keeps_the_readable_rows_and_the_damaged_file(made, tmp_path):
    _, made_file = made
    salvaged = 0
    for path in damaged_copies(made_file, tmp_path)[:4]:
        damaged = path.read_bytes()
        saved = call(["check", str(path), "--salvage"], tmp_path)
        assert saved.returncode in (0, 2) and "Traceback" not in saved.stdout + saved.stderr, saved.stderr
        if saved.returncode == 0:
            salvaged += 1
            assert Path(f"{path}.damaged").read_bytes() == damaged
            assert call(["check", str(path)], tmp_path).returncode == 0
            assert call(["report", str(path)], tmp_path).returncode == 0
        else:
            assert path.read_bytes() == damaged and "nothing can be salvaged" in saved.stderr
    assert salvaged >= 1
