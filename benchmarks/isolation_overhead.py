"""What measuring in a supervised worker process costs per configuration.

    python benchmarks/isolation_overhead.py SPEC [--ranks N] [--mpiexec CMD]

Tunes SPEC twice by brute force, with and without isolation, and prints per configuration the
median time the rank spent beyond the worker's own compile, verify and benchmark phases
(sending the configuration, receiving the result, bookkeeping), and the worker's start-up.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from mpitune.store.reader import CacheData, read


def tune(spec: str, ranks: int, mpiexec: str, cache: str, isolate: bool) -> CacheData:
    cmd = [
        *shlex.split(mpiexec),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "mpitune",
        spec,
        "--cache",
        cache,
        "--strategy",
        "brute_force",
    ] + ([] if isolate else ["--no-isolation"])
    # Each run compiles for real: CuPy and mpitune would otherwise reuse the first run's kernels from disk.
    env = dict(os.environ, CUPY_CACHE_DIR=cache + ".cupy-cache", MPITUNE_KERNEL_CACHE="off")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return read(cache)


def overhead_ms(data: CacheData) -> np.ndarray:
    res = data.results
    measured = res["compile_s"] + res["verify_s"] + res["benchmark_s"]
    return 1e3 * ((res["finished_s"] - res["started_s"]) - measured)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mpiexec", default=shutil.which("mpiexec") or "mpiexec")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = tune(args.spec, args.ranks, args.mpiexec, os.path.join(tmp, "plain.h5"), isolate=False)
        isolated = tune(args.spec, args.ranks, args.mpiexec, os.path.join(tmp, "iso.h5"), isolate=True)
    res = isolated["results"]
    compile_ms = 1e3 * np.median(res["compile_s"])
    extra = np.median(overhead_ms(isolated)) - np.median(overhead_ms(plain))
    tl = isolated["timeline"]
    startup = tl[(tl["phase"] == "startup")]
    print(f"command: python {' '.join(sys.argv)}")
    print(f"{len(res)} configurations on {args.ranks} rank(s); devices: {', '.join(sorted(set(res['device'])))}")
    print(
        f"median time per configuration outside compile/verify/benchmark: "
        f"{np.median(overhead_ms(plain)):.2f} ms in the rank's own process, "
        f"{np.median(overhead_ms(isolated)):.2f} ms with a worker process"
    )
    print(
        f"isolation costs {extra:.2f} ms per configuration, {100 * extra / compile_ms:.1f}% of the median "
        f"compile time ({compile_ms:.1f} ms)"
    )
    per_rank = {
        int(r): float((startup["end_s"] - startup["start_s"])[startup["rank"] == r].sum())
        for r in np.unique(startup["rank"])
    }
    print("start-up per rank with a worker (s): " + ", ".join(f"rank {r}: {s:.2f}" for r, s in per_rank.items()))
    print(f"wall time: {plain['runs']['wall_s'][0]:.2f} s in-process, {isolated['runs']['wall_s'][0]:.2f} s isolated")


if __name__ == "__main__":
    main()
