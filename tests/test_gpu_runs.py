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


def statuses(cache) -> dict[int, str]:
    with h5py.File(cache, "r") as f:
        res = f["results"][...]
    assert len(res) == len(set(res["config_id"]))  # each configuration exactly once
    return {int(r["config_id"]): r["status"].decode() for r in res}


BAD = {i for i in range(8) if i % 2 == 1}  # BAD is the last parameter: odd ids


@needs_gpu
def test_a_poisoned_context_costs_one_configuration_and_the_run_goes_on(tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    cache = tmp_path / "out.h5"
    proc = mpitune(min(GPUS, 2), [str(spec), "--cache", str(cache)], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    status = statuses(cache)
    assert {i for i, s in status.items() if s == "runtime_error"} == BAD
    assert all(status[i] == "ok" for i in set(range(8)) - BAD)
    with h5py.File(cache, "r") as f:
        assert b"restart" in set(f["timeline"]["phase"])


@needs_gpu
def test_without_isolation_a_poisoned_context_ends_the_run_and_reruns_finish(tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    cache = tmp_path / "out.h5"
    codes = []
    for _ in range(8):  # each rerun gets past at least one poisoning configuration
        proc = mpitune(min(GPUS, 2), [str(spec), "--cache", str(cache), "--no-isolation"], tmp_path, timeout=300)
        codes.append(proc.returncode)
        assert proc.returncode in (0, 75), proc.stderr
        if proc.returncode == 0:
            break
    assert codes[0] == 75 and codes[-1] == 0
    status = statuses(cache)
    assert sorted(status) == list(range(8))
    assert {i for i, s in status.items() if s == "runtime_error"} == BAD
    with h5py.File(cache, "r") as f:
        assert b"device_error" in set(f["runs"]["status"])


@needs_gpu
def test_a_hanging_kernel_times_out_and_the_gpu_is_usable_again(tmp_path):
    spec = tmp_path / "spec.py"
    # x[0] is 0 and never changes: a loop on a volatile global read the compiler must keep.
    spec.write_text(
        SPEC.replace(
            "if (BAD && i == 0) ((float *)0x10)[0] = 1.0f;",
            "if (BAD) { while (((volatile const float *)x)[0] == 0.0f) {} }",
        )
        + "timeout_s = 10\n"
    )
    cache = tmp_path / "out.h5"
    proc = mpitune(min(GPUS, 2), [str(spec), "--cache", str(cache)], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    status = statuses(cache)
    assert {i for i, s in status.items() if s == "timeout"} == BAD, status
    assert all(status[i] == "ok" for i in set(range(8)) - BAD)


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


@needs_gpu
def test_a_ported_kernel_tuner_script_tunes_gflops_with_power_and_clocks(tmp_path):
    """examples/kernel_tuner_port: constant memory, a templated kernel, dynamic shared memory
    per configuration, GFLOP/s as the objective and NVML's power and clocks, on every GPU."""
    import json
    import os

    from conftest import REPO

    cache = tmp_path / "port.h5"
    os.environ["GEMM_N"] = "1024"
    try:
        proc = mpitune(
            max(1, min(GPUS, 2)),
            [str(REPO / "examples" / "kernel_tuner_port" / "spec.py"), "--cache", str(cache)],
            tmp_path,
            timeout=600,
        )
    finally:
        del os.environ["GEMM_N"]
    assert proc.returncode == 0, proc.stderr
    s = report_json(cache)
    assert s["ok"] == s["configs"] == 48, s["failed"]
    with h5py.File(cache, "r") as f:
        metrics = dict(zip(json.loads(f["metrics"].attrs["names"]), f["metrics"][...].T))
        observed = dict(zip(json.loads(f["observed"].attrs["names"]), f["observed"][...].T))
    gflops = metrics["GFLOP/s"]
    assert s["best"]["metrics"]["GFLOP/s"] == pytest.approx(gflops.max())
    assert (observed["power_w"] > 10).all() and (observed["sm_clock_mhz"] > 100).all()
    assert (observed["energy_j"] > 0).all() and (metrics["GFLOP/J"] > 0).all()


@needs_gpu
def test_the_convolution_example_verifies_every_configuration(tmp_path):
    """examples/convolution_cupy at 512 x 512: every configuration of the space compiles and
    matches the FFT answer, but blocks of 1,024 threads whose registers do not fit, which are a
    launch error (on an H200: 64 x 16 threads with 4 x 4 outputs each), and the run goes on."""
    import os

    from conftest import REPO

    cache = tmp_path / "conv.h5"
    os.environ["CONV_N"] = "512"
    try:
        proc = mpitune(1, [str(REPO / "examples" / "convolution_cupy" / "spec.py"), "--cache", str(cache)], tmp_path)
    finally:
        del os.environ["CONV_N"]
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as f:
        res = f["results"][...]
    assert len(res) == len(set(res["config_id"])) == 310
    failed = res[res["status"] != b"ok"]
    assert set(failed["status"]) <= {b"launch_error"} and len(failed) <= 4, failed["error"]
    assert (failed["block_size_x"] * failed["block_size_y"] == 1024).all()
