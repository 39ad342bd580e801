# Broken: the prior (a Kernel Tuner cache of this kernel) shares no tunable parameter with the space.
# expect: prior
# names: priors/shares_nothing.json: it shares no tunable parameter with this space
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
prior = ["priors/shares_nothing.json"]
