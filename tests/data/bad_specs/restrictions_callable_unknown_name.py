# Broken: a callable restriction reads a parameter that does not exist.
# expect: restrictions
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
restrictions = [lambda config: config["STEPS"] > 1]
