"""Tune a tiled CUDA matrix multiply (float32, N x N) on one GPU per rank.

    mpirun -n 2 python -m mpitune examples/matmul_cupy/spec.py
    MATMUL_N=2048 mpirun -n 1 python -m mpitune examples/matmul_cupy/spec.py --cache mm2048.h5

The answer is computed once on rank 0 in float64 and compared on each GPU.
"""

import os

import numpy as np

n = int(os.environ.get("MATMUL_N", 4096))
rng = np.random.default_rng(1)
a = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
c = np.zeros((n, n), dtype=np.float32)

lang = "cupy"
kernel_name = "matmul"
kernel_source = "matmul.cu"
problem_size = (n, n)  # x: columns of C, y: rows of C
arguments = [c, a, b]
answer = [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32), None, None]
atol = 1e-3  # float32 sums of n products of values in [-0.5, 0.5), in each tiling's own order
compiler_options = [f"-DN={n}"]

tune_params = {
    "block_size_x": [16, 32, 64],
    "block_size_y": [4, 8, 16, 32],
    "tile_size_x": [1, 2, 4, 8],
    "tile_size_y": [1, 2, 4, 8],
    "tile_k": [16, 32],
}
# One block covers (block_size_x * tile_size_x) columns and (block_size_y * tile_size_y) rows.
grid_div_x = ["block_size_x", "tile_size_x"]
grid_div_y = ["block_size_y", "tile_size_y"]

restrictions = [
    # Blocks the GPU can launch (at most 1024 threads) and worth a full warp or more.
    "64 <= block_size_x * block_size_y <= 1024",
    # Static shared memory of one block: at most 48 KiB.
    "(block_size_y * tile_size_y + block_size_x * tile_size_x) * tile_k * 4 <= 48 * 1024",
    # At most 32 accumulators per thread, so the register file is not the only limit explored.
    "tile_size_x * tile_size_y <= 32",
    # Every thread loads at least one element of each slab (no idle loaders, no bounds checks).
    "block_size_y * tile_size_y * tile_k >= block_size_x * block_size_y",
    "block_size_x * tile_size_x * tile_k >= block_size_x * block_size_y",
]
iterations = 7
strategy = "brute_force"
