"""A shared-memory matrix transpose, with a restriction that excludes invalid block shapes.

    mpirun -n 2 python -m mpitune examples/transpose_cupy/spec.py

A block moves one square tile of block_size_x by block_size_x elements; each of its
block_size_y rows of threads handles block_size_x / block_size_y rows of the tile.
"""

import numpy as np

width, height = 8192, 4096
matrix = np.random.default_rng(3).random((height, width), dtype=np.float32)

lang = "cupy"
kernel_name = "transpose"
kernel_source = """
extern "C" __global__ void transpose(float *out, const float *in, int width, int height)
{
    __shared__ float tile[block_size_x][block_size_x + PAD];  /* PAD 1 avoids bank conflicts */
    int x = blockIdx.x * block_size_x + threadIdx.x;
    int y = blockIdx.y * block_size_x + threadIdx.y;
    for (int j = 0; j < block_size_x; j += block_size_y)
        if (x < width && y + j < height)
            tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * width + x];
    __syncthreads();
    x = blockIdx.y * block_size_x + threadIdx.x;
    y = blockIdx.x * block_size_x + threadIdx.y;
    for (int j = 0; j < block_size_x; j += block_size_y)
        if (x < height && y + j < width)
            out[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""
problem_size = (width, height)
arguments = [np.zeros((width, height), np.float32), matrix, np.int32(width), np.int32(height)]
answer = [np.ascontiguousarray(matrix.T), None, None, None]
atol = 0  # a transpose moves values; they must arrive exactly
tune_params = {"block_size_x": [8, 16, 32, 64], "block_size_y": [1, 2, 4, 8, 16, 32, 64], "PAD": [0, 1]}
grid_div_x = ["block_size_x"]
grid_div_y = ["block_size_x"]  # the tile is square: block_size_x rows of the input per block
restrictions = [
    "block_size_x % block_size_y == 0",  # whole rows of the tile per row of threads
    "block_size_x * block_size_y <= 1024",  # the most threads a CUDA block can have
]
iterations = 7
