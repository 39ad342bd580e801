# Broken: the cache path is an existing file that is not HDF5 (the kernel source).
# expect: cache
# The spec layer knows no HDF5: the scheduler refuses this file at start-up, asking the store.
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
cache = "scale.c"
