"""The header of device targets in a CUDA kernel: a real tuning run of the CuPy matrix multiply
(examples/matmul_cupy) on this GPU, ``export --format header``, and the kernel compiled with
NVRTC (cupy.RawModule) with the header included, for this GPU's target and for the default, then
run and checked against numpy. GPU tests: skipped where there is no CUDA GPU."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, mpi_env, mpitune, report_json

pytestmark = pytest.mark.gpu

N = 512
SPEC = f"""
import numpy as np

n = {N}
rng = np.random.default_rng(1)
a = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
lang = "cupy"
kernel_name = "matmul"
kernel_source = {str(REPO / "examples" / "matmul_cupy" / "matmul.cu")!r}
problem_size = (n, n)
arguments = [np.zeros((n, n), np.float32), a, b]
answer = [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32), None, None]
atol = 1e-3
compiler_options = ["-DN={N}"]
tune_params = {{
    "block_size_x": [16, 32], "block_size_y": [8, 16], "tile_size_x": [2, 4], "tile_size_y": [2], "tile_k": [16]
}}
grid_div_x = ["block_size_x", "tile_size_x"]
grid_div_y = ["block_size_y", "tile_size_y"]
iterations = 5
"""
PARAMS = ("block_size_x", "block_size_y", "tile_size_x", "tile_size_y", "tile_k")
# Reads back what the header defined, so the test launches the kernel as the header configured it.
PROBE = (
    'extern "C" __global__ void probe(int *out) {'
    + " ".join(f"out[{i}] = {name};" for i, name in enumerate(PARAMS))
    + "}"
)


def test_the_header_configures_the_cuda_matrix_multiply(cp, tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    proc = mpitune(1, [str(spec), "--out", str(tmp_path / "mm.h5")], tmp_path, timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    header = tmp_path / "matmul_targets.h"
    export = [sys.executable, "-m", "mpitune", "export", str(tmp_path / "mm.h5"), "--format", "header"]
    done = subprocess.run([*export, "--out", str(header)], env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = report_json(tmp_path / "mm.h5")
    best = (summary["confirmation"] or {}).get("winner") or summary["best"]["config"]
    device = re.sub("[^0-9a-zA-Z]+", "_", summary["devices"][0]["device"].strip())
    source = f'#include "{header.name}"\n' + (REPO / "examples" / "matmul_cupy" / "matmul.cu").read_text() + PROBE
    rng = np.random.default_rng(2)
    a = rng.uniform(-0.5, 0.5, (N, N)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, (N, N)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for target in (f"-DTARGET_{device}", None):  # this GPU's block, and the default (one device: the same)
        options = (f"-DN={N}", f"-I{tmp_path}", *([target] if target else []))
        module = cp.RawModule(code=source, options=options)
        got = cp.zeros(len(PARAMS), dtype=cp.int32)
        module.get_function("probe")((1,), (1,), (got,))
        config = dict(zip(PARAMS, got.get().tolist()))
        assert config == best, (target, config)
        c = cp.zeros((N, N), dtype=cp.float32)
        grid = (
            N // (config["block_size_x"] * config["tile_size_x"]),
            N // (config["block_size_y"] * config["tile_size_y"]),
        )
        module.get_function("matmul")(
            grid, (config["block_size_x"], config["block_size_y"]), (c, cp.asarray(a), cp.asarray(b))
        )
        np.testing.assert_allclose(c.get(), want, atol=1e-3)
