# Broken: the spec is fine but the --batch-size flag is 0.
# expect: batch_size
# args: --batch-size 0
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
