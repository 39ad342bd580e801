"""The smallest CUDA tuning problem: c = a + b, tuning the block size and the elements per thread.

mpirun -n 2 python -m mpitune examples/vector_add_cupy/spec.py
"""

import numpy as np

n = 1 << 26  # 64 Mi floats: 768 MiB moved per call, so the kernel is memory-bound
rng = np.random.default_rng(7)
a = rng.random(n, dtype=np.float32)
b = rng.random(n, dtype=np.float32)

lang = "cupy"
kernel_name = "vector_add"
kernel_source = """
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n)
{
    /* Each block covers block_size_x * PER_THREAD consecutive elements, coalesced. */
    int first = blockIdx.x * block_size_x * PER_THREAD + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < PER_THREAD; k++) {
        int i = first + k * block_size_x;
        if (i < n)
            c[i] = a[i] + b[i];
    }
}
"""
problem_size = n
arguments = [np.zeros(n, np.float32), a, b, np.int32(n)]
answer = [a + b, None, None, None]
tune_params = {"block_size_x": [32, 64, 128, 256, 512, 1024], "PER_THREAD": [1, 2, 4, 8]}
grid_div_x = ["block_size_x", "PER_THREAD"]
iterations = 7
