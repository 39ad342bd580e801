# Broken: the second of two objectives is neither time nor a metric (Kernel Tuner's list form).
# expect: objective
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
metrics = {"threads": "STEP * 32"}
objective = ["time", "energy"]
objective_higher_is_better = [False, False]
