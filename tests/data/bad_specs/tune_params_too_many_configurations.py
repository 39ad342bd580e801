# Broken: 10 parameters of 10 values: 10^10 configurations, too many to enumerate (was a MemoryError).
# expect: tune_params: the search space has 10,000,000,000 configurations (10 x 10
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": list(range(1, 11)), **{f"P{i}": list(range(10)) for i in range(9)}}
