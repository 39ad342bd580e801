# Broken: constant memory given as a Python list, whose C type is ambiguous.
# expect: cmem_args
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
lang = "cupy"
kernel_source = "__global__ void scale(float *y, const float *x, int n) {}"
cmem_args = {"coeffs": [1.0, 2.0]}
