# Broken: a GPU kernel whose shared memory size expression names a parameter that does not exist.
# expect: smem_args
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
lang = "cupy"
kernel_source = "__global__ void scale(float *y, const float *x, int n) {}"
smem_args = {"size": "block_size * 4"}
