"""Kernels that hang, crash their process or give wrong answers, under a real mpiexec."""

import time

import h5py
import pytest
from conftest import mpitune, report_json

FAULTY_C = r"""
/* MODE 0 is right; 1 never returns; 2 writes through a null pointer; 3 is wrong. */
void scale(float *y, const float *x, int n)
{
    volatile int spin = (MODE == 1);
    while (spin) {}
    if (MODE == 2)
        *(volatile int *)0 = 1;
    for (int i = 0; i < n; i++)
        y[i] = (MODE == 3 ? 3.0f : 2.0f) * x[i];
}
"""
SPEC = """
import numpy as np
n = 1024
x = np.arange(n, dtype=np.float32)
lang = "C"
kernel_name = "scale"
kernel_source = "faulty.c"
arguments = [np.zeros(n, np.float32), x, np.int32(n)]
answer = [2 * x, None, None]
tune_params = {"MODE": [0, 1, 2, 3], "COPY": [0, 1]}
iterations = 3
timeout_s = 2
"""


def test_hangs_and_crashes_are_recorded_and_the_run_goes_on(tmp_path):
    (tmp_path / "faulty.c").write_text(FAULTY_C)
    (tmp_path / "spec.py").write_text(SPEC)
    cache = tmp_path / "out.h5"
    start = time.monotonic()
    proc = mpitune(2, [str(tmp_path / "spec.py"), "--cache", str(cache)], tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as f:
        rows = f["results"][...]
        phases = {p.decode() for p in f["timeline"]["phase"]}
    status = {int(r["MODE"]): set() for r in rows}
    for r in rows:
        status[int(r["MODE"])].add(r["status"].decode())
    assert status == {0: {"ok"}, 1: {"timeout"}, 2: {"runtime_error"}, 3: {"verify_failed"}}
    errors = {r["status"].decode(): r["error"].decode() for r in rows}
    assert "no result after 2.0 s" in errors["timeout"] and "restarted" in errors["timeout"]
    assert "SIGSEGV" in errors["runtime_error"]
    assert {"lost", "restart"} <= phases
    assert elapsed < 60  # two hangs of 2 s each, not a job stuck until its limit
    s = report_json(cache)
    for r in s["per_rank"]:
        assert r["busy_s"] + r["idle_s"] == pytest.approx(r["wall_s"], rel=0.05)


def test_without_isolation_the_same_results_for_good_kernels(tmp_path):
    (tmp_path / "faulty.c").write_text(FAULTY_C)
    (tmp_path / "spec.py").write_text(SPEC.replace('"MODE": [0, 1, 2, 3]', '"MODE": [0, 3]'))
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(tmp_path / "spec.py"), "--cache", str(cache), "--no-isolation"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = report_json(cache)
    assert s["ok"] == 2 and s["failed"] == {"verify_failed": 2}


def test_a_worker_restarts_after_the_working_folder_was_deleted(tmp_path):
    """A job's scratch folder cleaned up mid-run, then a crash: the measuring worker restarts
    (spawned in /) and the run goes on to the end with every configuration recorded."""
    work = tmp_path / "work"
    work.mkdir()
    source = FAULTY_C.replace("if (MODE == 2)", f'if (MODE == 2 && (rmdir("{work}") || 1))').replace(
        "void scale", "#include <unistd.h>\nvoid scale", 1
    )
    (tmp_path / "faulty.c").write_text(source)
    (tmp_path / "spec.py").write_text(SPEC.replace('"MODE": [0, 1, 2, 3], "COPY": [0, 1]', '"MODE": [0, 2]'))
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(tmp_path / "spec.py"), "--out", str(cache), "--confirm", "0", "--no-calibrate"], work)
    assert proc.returncode == 0, proc.stderr
    assert not work.exists() and "working folder was deleted" in proc.stderr
    s = report_json(cache)
    assert s["configs"] == 2 and s["ok"] == 1 and s["failed"] == {"runtime_error": 1}, s
