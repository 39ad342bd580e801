"""The Kernel Tuner script that spec.py ports: run it with Kernel Tuner 1.5.0 on one GPU.

    python examples/kernel_tuner_port/kernel_tuner_script.py

Everything between the imports and tune_kernel(...) moves into spec.py unchanged; see
docs/from-kernel-tuner.md.
"""

import os

import numpy as np
from kernel_tuner import tune_kernel
from kernel_tuner.observers.nvml import NVMLObserver

n = int(os.environ.get("GEMM_N", 2048))
rng = np.random.default_rng(7)
a = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
c = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
alpha, beta = 1.5, -0.5

tune_params = {
    "block_size_x": [16, 32],
    "block_size_y": [8, 16],
    "tile_size_x": [2, 4],
    "tile_size_y": [2, 4, 8],
    "tile_k": [16, 32],
}
restrictions = [
    "block_size_x * block_size_y >= 128",
    "block_size_y * tile_size_y * tile_k >= block_size_x * block_size_y",
    "block_size_x * tile_size_x * tile_k >= block_size_x * block_size_y",
]

results, env = tune_kernel(
    "gemm<tile_size_x, tile_size_y>",
    open(os.path.join(os.path.dirname(__file__), "gemm.cu")).read(),
    (n, n),
    [c, a, b],
    tune_params,
    lang="cupy",
    grid_div_x=["block_size_x", "tile_size_x"],
    grid_div_y=["block_size_y", "tile_size_y"],
    restrictions=restrictions,
    cmem_args={"alpha_beta": np.array([alpha, beta], np.float32)},
    smem_args={"size": lambda p: p["tile_k"] * p["block_size_x"] * p["tile_size_x"] * 4},
    compiler_options=[f"-DN={n}"],
    answer=[(alpha * (a.astype(np.float64) @ b) + beta * c).astype(np.float32), None, None],
    atol=1e-3,
    metrics={
        "GFLOP/s": lambda p: 2 * n**3 / 1e9 / (p["time"] / 1e3),
        "GFLOP/J": lambda p: 2 * n**3 / 1e9 / p["nvml_energy"],
    },
    objective="GFLOP/s",
    objective_higher_is_better=True,
    observers=[
        NVMLObserver(["nvml_power", "nvml_energy", "core_freq", "mem_freq", "temperature"], continuous_duration=0.25)
    ],
    iterations=7,
    strategy="brute_force",
)
