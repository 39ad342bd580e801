"""kernel_tuner_script.py for the CPU: the same kind of Kernel Tuner script, for a C kernel,
with only its import line changed to mpitune's. It runs where there is gcc and no GPU (CI does):

    python examples/kernel_tuner_port/kernel_tuner_script_c.py

``tune_kernel`` returns what Kernel Tuner's returns: a list of one dict per configuration and
the environment, with the best configuration. See docs/python-api.md.
"""

import os
from pathlib import Path

import numpy as np

from mpitune import tune_kernel  # was: from kernel_tuner import tune_kernel

n = int(os.environ.get("GEMM_N", 256))
rng = np.random.default_rng(7)
a = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
c = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
alpha, beta = 1.5, -0.5

tune_params = {
    "tile_i": [8, 16, 32],
    "tile_j": [32, 64, 128],
    "tile_k": [16, 32],
    "unroll_j": [1, 4],
}
restrictions = ["tile_j % unroll_j == 0", "tile_i * tile_j <= 2048"]

results, env = tune_kernel(
    "gemm",
    (Path(__file__).parent / "gemm.c").read_text(),
    (n, n),
    [c, a, b, np.float32(alpha), np.float32(beta)],
    tune_params,
    lang="C",
    restrictions=restrictions,
    compiler_options=[f"-DN={n}"],
    answer=[(alpha * (a.astype(np.float64) @ b) + beta * c).astype(np.float32), None, None, None, None],
    atol=1e-3,
    metrics={"GFLOP/s": lambda p: 2 * n**3 / 1e9 / (p["time"] / 1e3)},
    objective="GFLOP/s",
    objective_higher_is_better=True,
    iterations=5,
    strategy="brute_force",
)

best = env["best_config"]
print(
    f"{len(results)} configurations, {sum(isinstance(r['time'], float) for r in results)} passed; "
    f"best {best['GFLOP/s']:.2f} GFLOP/s with",
    {name: best[name] for name in tune_params},
)
