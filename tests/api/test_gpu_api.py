"""The Python API on a real GPU: Kernel Tuner's CUDA script with only its imports changed, and
run_kernel and tune_kernel on the CuPy backend. GPU tests: skipped where there is no CUDA GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, mpi_env

import mpitune

pytestmark = pytest.mark.gpu

PORT = REPO / "examples" / "kernel_tuner_port"
VADD = r"""
extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
RUN_SCRIPT = """
import json, runpy, sys
ns = runpy.run_path(sys.argv[1], run_name="__main__")
results, env = ns["results"], ns["env"]
print("RESULT " + json.dumps({"results": results, "env": env}, default=str))
"""


def test_the_kernel_tuner_cuda_script_runs_with_only_its_imports_changed(cp, tmp_path):
    text = (PORT / "kernel_tuner_script.py").read_text()
    ported = text.replace("from kernel_tuner import tune_kernel", "from mpitune import tune_kernel").replace(
        "from kernel_tuner.observers.nvml import NVMLObserver", "from mpitune.observers import NVMLObserver"
    )
    assert ported.count("mpitune") >= 2 and "kernel_tuner" not in ported.split('"""', 2)[2]
    script = tmp_path / "kernel_tuner_script.py"
    script.write_text(ported)
    (tmp_path / "gemm.cu").write_text((PORT / "gemm.cu").read_text())
    proc = subprocess.run(
        [sys.executable, "-c", RUN_SCRIPT, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env={**mpi_env(), "GEMM_N": "1024"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    results, env = out["results"], out["env"]
    ok = [r for r in results if isinstance(r["time"], float)]
    assert len(results) >= 8 and len(ok) >= len(results) // 2
    for r in ok:  # Kernel Tuner's shapes: parameters, time and times in ms, metrics, observed values
        assert {"block_size_x", "tile_k", "time", "times", "GFLOP/s", "GFLOP/J"} <= set(r)
        assert len(r["times"]) == 7 and min(r["times"]) <= r["time"] <= max(r["times"])
        assert r["GFLOP/s"] == pytest.approx(2 * 1024**3 / 1e9 / (r["time"] / 1e3), rel=1e-6)
        assert r["nvml_energy"] > 0 and r["nvml_power"] > 0
    best = max(ok, key=lambda r: r["GFLOP/s"])
    assert all(env["best_config"][k] == best[k] for k in ("block_size_x", "block_size_y", "tile_size_x"))
    assert "NVIDIA" in env["device_name"] and env["objective"] == "GFLOP/s"


def test_run_kernel_returns_the_gpus_outputs(cp):
    n = 10_000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2.5, np.float32)
    c, a_out, b_out, n_out = mpitune.run_kernel(
        "vadd", VADD, n, [np.zeros(n, np.float32), a, b, np.int32(n)], {"block_size_x": 128}, lang="cupy"
    )
    assert isinstance(c, np.ndarray) and np.array_equal(c, a + b)
    assert np.array_equal(a_out, a) and np.array_equal(b_out, b) and int(n_out) == n


def test_tune_kernel_on_one_and_two_ranks_finds_every_configuration(cp, tmp_path):
    n = 1 << 20
    a, b = np.ones(n, np.float32), np.full(n, 2.0, np.float32)
    common = dict(
        lang="cupy",
        answer=[a + b, None, None, None],
        iterations=3,
        metrics={"GB/s": f"3 * 4 * {n} / 1e9 / (time / 1e3)"},
        objective="GB/s",
        objective_higher_is_better=True,
    )
    params = {"block_size_x": [64, 128, 256, 512, 1024]}
    args = [np.zeros(n, np.float32), a, b, np.int32(n)]
    one, _ = mpitune.tune_kernel("vadd", VADD, n, args, params, ranks=1, cache=str(tmp_path / "one.h5"), **common)
    two, env = mpitune.tune_kernel("vadd", VADD, n, args, params, ranks=2, cache=str(tmp_path / "two.h5"), **common)
    assert sorted(r["block_size_x"] for r in one) == sorted(r["block_size_x"] for r in two) == params["block_size_x"]
    assert all(isinstance(r["time"], float) and r["GB/s"] > 0 for r in one + two)
    assert env["ranks"] == 2
