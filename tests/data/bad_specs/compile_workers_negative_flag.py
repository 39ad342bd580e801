# Broken: the spec is fine but --compile-workers is negative.
# expect: compile_workers
# args: --compile-workers -1
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
