# Broken: there is no arguments.
# expect: arguments
import numpy as np

n = 64
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
tune_params = {"STEP": [1, 2, 4]}
