"""Tune a tiled C matrix multiply on the CPU.

mpiexec -n 4 python -m mpitune examples/matmul_c/spec.py
"""

import numpy as np

n = 256
rng = np.random.default_rng(1)
a = rng.random((n, n), dtype=np.float32)
b = rng.random((n, n), dtype=np.float32)
c = np.zeros((n, n), dtype=np.float32)

lang = "C"
kernel_name = "matmul"
kernel_source = "matmul.c"
problem_size = (n, n)
arguments = [c, a, b]
answer = [a.astype(np.float64) @ b.astype(np.float64), None, None]
atol = 1e-2  # float32 sums of n products, in an order each tiling chooses
compiler_options = [f"-DN={n}", "-march=native"]
tune_params = {
    "TILE_I": [8, 16, 32, 64],
    "TILE_J": [32, 64, 128, 256],
    "TILE_K": [16, 32, 64],
    "UNROLL_J": [1, 8],
}
restrictions = ["TILE_I * TILE_J <= 4096", "TILE_J % UNROLL_J == 0"]
iterations = 5
strategy = "brute_force"
