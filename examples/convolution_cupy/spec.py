"""Tune a 2D convolution (float32, N x N output, 15 x 15 filter) on one GPU per rank.

    mpirun -n 2 python -m mpitune examples/convolution_cupy/spec.py
    CONV_N=2048 mpirun -n 1 python -m mpitune examples/convolution_cupy/spec.py --cache conv2048.h5

The answer is computed once on rank 0 in float64 (by FFT) and compared on each GPU.
"""

import os

import numpy as np

n = int(os.environ.get("CONV_N", 4096))
fh = fw = 15
rng = np.random.default_rng(1)
image = rng.uniform(-0.5, 0.5, (n + fh - 1, n + fw - 1)).astype(np.float32)
filt = rng.uniform(-0.5, 0.5, (fh, fw)).astype(np.float32)
output = np.zeros((n, n), dtype=np.float32)


def correlate(img: np.ndarray, f: np.ndarray) -> np.ndarray:
    """out[y, x] = sum over (i, j) of img[y + i, x + j] * f[i, j], in float64 by FFT."""
    shape = img.shape
    spectrum = np.fft.rfft2(img.astype(np.float64)) * np.conj(np.fft.rfft2(f.astype(np.float64), shape))
    return np.fft.irfft2(spectrum, shape)[: shape[0] - f.shape[0] + 1, : shape[1] - f.shape[1] + 1]


lang = "cupy"
kernel_name = "convolution"
kernel_source = "convolution.cu"
problem_size = (n, n)  # x: columns of the output, y: rows
arguments = [output, image, filt]
answer = [correlate(image, filt).astype(np.float32), None, None]
atol = 1e-3  # float32 sums of 225 products of values in [-0.5, 0.5), in each tiling's own order
compiler_options = [f"-DN={n}", f"-DFH={fh}", f"-DFW={fw}"]

tune_params = {
    "block_size_x": [16, 32, 64, 128],
    "block_size_y": [1, 2, 4, 8, 16],
    "tile_size_x": [1, 2, 4],
    "tile_size_y": [1, 2, 4],
    "use_padding": [0, 1],
}
grid_div_x = ["block_size_x", "tile_size_x"]
grid_div_y = ["block_size_y", "tile_size_y"]

restrictions = [
    # A full warp or more, and blocks the GPU can launch.
    "32 <= block_size_x * block_size_y <= 1024",
    # Static shared memory of one block: at most 48 KiB.
    "(block_size_y * tile_size_y + 14) * (block_size_x * tile_size_x + 14 + use_padding) * 4 <= 48 * 1024",
]
iterations = 7
strategy = "brute_force"
