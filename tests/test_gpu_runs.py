"""Whole runs on real GPUs under mpirun; skipped where CuPy or a CUDA GPU is missing (CI)."""

from __future__ import annotations

import h5py
import pytest

from conftest import mpitune, report_json


def gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver, no device: all mean no GPU here
        return 0


GPUS = gpu_count()
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs CuPy and a CUDA GPU")

# BAD=1 writes through a wild pointer: an illegal address, which poisons the CUDA context.
SPEC = '''
import numpy as np
n = 1 << 20
x = np.arange(n, dtype=np.float32)
lang = "cupy"
kernel_name = "scale"
kernel_source = """
extern "C" __global__ void scale(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (BAD && i == 0) ((float *)0x10)[0] = 1.0f;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
problem_size = n
arguments = [np.zeros(n, np.float32), x, np.int32(n)]
answer = [2 * x, None, None]
tune_params = {"block_size_x": [64, 128, 256, 512], "BAD": [0, 1]}
'''


@needs_gpu
def test_a_poisoned_context_ends_the_run_cleanly_and_reruns_finish_the_space(tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    cache = tmp_path / "out.h5"
    ranks = min(GPUS, 2)
    codes = []
    for _ in range(8):  # each rerun gets past at least one poisoning configuration
        proc = mpitune(ranks, [str(spec), "--cache", str(cache)], tmp_path, timeout=300)
        codes.append(proc.returncode)
        assert proc.returncode in (0, 75), proc.stderr
        if proc.returncode == 0:
            break
    assert codes[0] == 75 and codes[-1] == 0
    with h5py.File(cache, "r") as f:
        res = f["results"][...]
        runs = f["runs"][...]
    assert sorted(res["config_id"]) == list(range(8))  # each exactly once, nothing lost
    status = {int(r["config_id"]): r["status"].decode() for r in res}
    bad = {i for i in range(8) if i % 2 == 1}  # BAD is the last parameter: odd ids
    assert {i for i, s in status.items() if s == "runtime_error"} == bad
    assert all(status[i] == "ok" for i in set(range(8)) - bad)
    assert b"device_error" in set(runs["status"])
    errors = [r["error"].decode() for r in res if r["status"] == b"runtime_error"]
    assert all("poisons the CUDA context" in e or "illegal" in e.lower() for e in errors), errors


@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs")
def test_two_ranks_use_two_gpus(tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC.replace('"BAD": [0, 1]', '"BAD": [0]'))
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as f:
        details = [d.decode() for d in f["ranks"]["device_detail"]]
    assert len(details) == 2 and details[0] != details[1] and all("PCI" in d for d in details)
    s = report_json(cache)
    assert s["configs"] == 4 and s["ok"] == 4
