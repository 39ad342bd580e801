# Broken: the spec is fine but the --time-limit flag is negative.
# names: argument --time-limit: must be greater than 0, got '-10'
# args: --time-limit -10
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
