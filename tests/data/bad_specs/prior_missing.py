# Broken: the prior names a file that does not exist.
# expect: prior: file 'priors/none.json' not found
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
prior = ["priors/none.json"]
