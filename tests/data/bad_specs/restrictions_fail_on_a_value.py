# Broken: a legal restriction that fails on one value (0 to a negative power).
# expect: restrictions: 'STEP**-1 > 0' failed on {'STEP': 0}: ZeroDivisionError
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 0, 4]}
restrictions = ["STEP**-1 > 0"]
