# Broken: texmem_args is a Kernel Tuner argument mpitune does not support.
# expect: texmem_args
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
texmem_args = {}
