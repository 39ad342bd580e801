# Broken: the prior given on the command line is a damaged HDF5 file.
# expect: prior
# names: priors/damaged.h5
# args: --prior priors/damaged.h5 --max-fevals 2
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
tune_params = {"STEP": [1, 2, 4]}
