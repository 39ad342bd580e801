# Broken: the prior measured another kernel, and prior_any_kernel is not set.
# expect: prior
# names: priors/other_kernel.json measured kernel 'other', not 'scale'
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
prior = "priors/other_kernel.json"
