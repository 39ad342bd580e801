# Broken: a restriction whose constant would take hours to compute, holding the interpreter.
# expect: restrictions: '3**(10**10) > STEP' computes 3 ** 10 ** 10
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
restrictions = ["3**(10**10) > STEP"]
