# Broken: a value past the 64-bit integers the results file keeps (it was measured, then the write failed).
# expect: tune_params: 'BIG' has value 9223372036854775808, outside the 64-bit integers
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2], "BIG": [1, 2**63]}
