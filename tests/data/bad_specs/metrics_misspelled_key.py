# Broken: a metric reads p["tme"]: the sample configuration finds it before any rank starts.
# expect: metrics
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
metrics = {"GFLOP/s": lambda p: n / 1e9 / (p["tme"] / 1e3)}
objective = "GFLOP/s"
objective_higher_is_better = True
