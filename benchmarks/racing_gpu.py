"""What racing saves on a real device: one spec tuned by brute force with full timing and with racing.

    python benchmarks/racing_gpu.py [SPEC] [--ranks 1] [--mpirun "mpirun --bind-to none"]
                                    [--rules majority spread]

SPEC (default: the examples' CUDA matrix multiply) is tuned from an empty compile cache into a
fresh file once with ``racing = False`` and once per racing rule (model/judging/racing.py), each a copy
of the spec with that line added. Prints, from the files: the wall time, the GPU time
(verified launch + timed launches, ``verify_s + benchmark_s``), the timed launches, the
configurations raced, and whether each racing run found the best configuration of full timing.

With ``--before`` it also tunes the way configurations were measured before the verified launch
was the warm-up: an untimed warm-up, a verified launch and ``iterations`` timed launches, 2 +
iterations in all. It is the same count of launches of the same kernel as full timing with one
more iteration (1 verified + iterations + 1 timed), which is what it runs (``racing = False``,
``iterations`` raised by one); the ratios against it are the GPU time saved since then.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from mpitune.model.judging.racing import RaceRule
from mpitune.store.reader import read

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tune(mpirun: list[str], ranks: int, spec: str, out: str, env: dict) -> float:
    started = time.perf_counter()
    cmd = [*mpirun, "-n", str(ranks), sys.executable, "-m", "mpitune", spec, "--out", out, "--strategy", "brute_force"]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def figures(path: str) -> dict:
    data = read(path)
    res = data.results
    ok = res[res["status"] == "ok"]
    best = ok[np.argmin(ok["time_ms"])]
    return {
        "wall_s": float(data.runs["wall_s"][-1]),
        "gpu_s": float(res["verify_s"].sum() + res["benchmark_s"].sum()),
        "launches": int(res["launches"].sum()),
        "raced": int(res["raced"].sum()),
        "configs": len(res),
        "best": {n: best[n].item() for n in data.param_names},
        "best_ms": float(best["time_ms"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec", nargs="?", default=os.path.join(REPO, "examples", "matmul_cupy", "spec.py"))
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--mpirun", default="mpirun --bind-to none")
    p.add_argument("--rules", nargs="+", choices=[rule.value for rule in RaceRule], default=[r.value for r in RaceRule])
    p.add_argument("--before", action="store_true", help="also tune with 2 + iterations launches, as before")
    args = p.parse_args()
    spec = os.path.abspath(args.spec)
    with open(spec) as fh:
        source = fh.read()
    variants = {"full timing": "racing = False", **{rule: f"racing = {rule!r}" for rule in args.rules}}
    if args.before:
        variants["before"] = f"racing = False\niterations = {_iterations(spec) + 1}"
    copies = {
        name: os.path.join(os.path.dirname(spec), f"racing_{i}_{os.path.basename(spec)}")
        for i, name in enumerate(variants)
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            got = {}
            for name, value in variants.items():
                with open(copies[name], "w") as out:
                    out.write(f"{source}\n{value}\n")
                cupy_cache = os.path.join(tmp, f"cupy-{len(got)}")
                env = dict(os.environ, PYTHONPATH=REPO, CUPY_CACHE_DIR=cupy_cache, MPITUNE_KERNEL_CACHE="off")
                h5 = os.path.join(tmp, f"{len(got)}.h5")
                process_s = tune(shlex.split(args.mpirun), args.ranks, copies[name], h5, env)
                got[name] = {**figures(h5), "process_s": process_s}
    finally:
        for path in copies.values():
            if os.path.exists(path):
                os.remove(path)
        shutil.rmtree(os.path.join(os.path.dirname(spec), "__pycache__"), ignore_errors=True)
    print(f"command: python benchmarks/racing_gpu.py {shlex.join(sys.argv[1:])}")
    for name, f in got.items():
        print(
            f"{name:12s}: {f['configs']} configs, wall {f['wall_s']:.1f} s (process {f['process_s']:.1f} s), "
            f"GPU {f['gpu_s']:.2f} s, {f['launches']} timed launches, {f['raced']} raced, "
            f"best {f['best_ms']:.4f} ms {f['best']}"
        )
    for base in ("full timing", "before") if args.before else ("full timing",):
        a = got[base]
        for rule in args.rules:
            b = got[rule]
            print(
                f"{rule}/{base}: GPU time {b['gpu_s'] / a['gpu_s']:.3f}, "
                f"timed launches {b['launches'] / a['launches']:.3f}, "
                f"wall {b['wall_s'] / a['wall_s']:.3f}; same best: {a['best'] == b['best']}"
            )


def _iterations(spec: str) -> int:
    """The spec's timed launches per configuration, as mpitune's own loader reads them."""
    from mpitune.spec.load import load_spec

    return load_spec(spec)[0].kernel.iterations


if __name__ == "__main__":
    main()
