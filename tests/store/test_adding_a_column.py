"""A column is a one-file change (docs/architecture.md, "Adding things"): in a copy of the package
whose schema alone gains a results column named as a field of ``Result``, a real run writes it
and a resumed run reads it back, with nothing else edited."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
from conftest import REPO, mpi_env, mpiexec, write_scale_spec

# The verified launch's time: a field every result has, which the file does not keep.
NEW = '    Column("first_ms", "f8", "its verified launch, ms"),\n'
AFTER = '    Column("benchmark_s", "f8", "its timed launches, s"),\n'
READ_BACK = """
import json, sys, h5py
from mpitune.store.rows import rows_as_results
with h5py.File(sys.argv[1], "r") as f:
    rows = f["results"][...]
print(json.dumps([r.first_ms for r in rows_as_results(rows, [{}] * len(rows))]))
"""


def copy_with_column(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "mpitune", root / "mpitune", ignore=shutil.ignore_patterns("__pycache__"))
    schema = root / "mpitune" / "model" / "schema.py"
    text = schema.read_text()
    assert text.count(AFTER) == 1, "the schema's benchmark_s column moved: update this test"
    schema.write_text(text.replace(AFTER, AFTER + NEW))
    return root


def run(root: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**mpi_env(), "PYTHONPATH": str(root)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_column_added_to_the_schema_alone_is_written_and_read_back(tmp_path):
    root = copy_with_column(tmp_path)
    spec = write_scale_spec(tmp_path, tune_params='{"STEP": [1, 2, 4, 8], "MODE": [0, 1]}')
    tune = [*mpiexec(), "-n", "1", sys.executable, "-m", "mpitune", str(spec)]
    first = run(root, tune, tmp_path)
    assert first.returncode == 0, first.stderr
    cache = spec.with_suffix(".h5")
    with h5py.File(cache, "r") as f:
        rows = f["results"][...]
    assert "first_ms" in rows.dtype.names
    ok = rows["status"] == b"ok"
    assert ok.sum() == 4 and (~ok).sum() == 4  # MODE 1 does not compile
    assert np.all(rows["first_ms"][ok] > 0) and np.all(np.isnan(rows["first_ms"][~ok]))

    read = run(root, [sys.executable, "-c", READ_BACK, str(cache)], tmp_path)
    assert read.returncode == 0, read.stderr
    np.testing.assert_array_equal(np.array(json.loads(read.stdout)), rows["first_ms"])

    again = run(root, tune, tmp_path)  # a resume reads every row back through the same path
    assert again.returncode == 0, again.stderr
    shown = run(root, [sys.executable, "-m", "mpitune", "report", str(cache)], tmp_path)
    assert shown.returncode == 0 and "8 of 8 configurations recorded" in shown.stdout, shown.stdout + shown.stderr
