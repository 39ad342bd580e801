"""Class 9: a compile that hangs (an ``#include`` of a FIFO nobody writes) is a ``timeout``, and
neither gcc nor the cc1 it started outlives it: not after the deadline, not after the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import h5py
import pytest
from conftest import mpi_env, mpiexec, write_scale_spec

HANGING_C = r"""
#if STEP == 2
#include "{fifo}"
#endif
void scale(float *y, const float *x, int n)
{{
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}}
"""


def _compilers(tag: str) -> list[int]:
    """gcc, cc1 and as of this test: each carries the tag among its options."""
    found = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != os.getpid()]


@pytest.fixture
def hanging(tmp_path):
    fifo = tmp_path / "never.h"
    os.mkfifo(fifo)
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4], "MODE": [0]}', extra="timeout_s = 2\n")
    (tmp_path / "scale.c").write_text(HANGING_C.format(fifo=fifo))
    tag = f"ORPHAN_{uuid.uuid4().hex}"
    yield spec, tag
    for pid in _compilers(tag):  # what a failing test left: not for the next one
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_hanging_compile_is_a_timeout_and_leaves_no_compiler(tmp_path, hanging, workers):
    """Compiled in the measuring worker (0) or in a compile worker ahead of it (1)."""
    spec, tag = hanging
    cache = tmp_path / "out.h5"
    env = mpi_env()
    env["CC"] = f"gcc -D{tag}"
    started = time.monotonic()
    proc = subprocess.run(
        [
            *mpiexec(),
            "-n",
            "1",
            sys.executable,
            "-m",
            "mpitune",
            str(spec),
            "--cache",
            str(cache),
            "--compile-workers",
            workers,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 20, took
    with h5py.File(cache, "r") as f:
        rows = f["results"][:]
    statuses = {int(r["config_id"]): r["status"].decode() for r in rows}
    errors = {int(r["config_id"]): r["error"].decode() for r in rows}
    assert len(statuses) == 3 and statuses[0] == statuses[2] == "ok", statuses
    # The measuring worker records a timeout; a compile worker's deadline is the compile's own.
    assert statuses[1] == "timeout" or "compiling took longer than 2.0 s" in errors[1], (statuses, errors)
    time.sleep(0.5)  # the watcher's SIGKILL is asynchronous to the worker's death
    assert _compilers(tag) == [], subprocess.run(
        ["ps", "-f", *map(str, _compilers(tag))], capture_output=True, text=True
    ).stdout
