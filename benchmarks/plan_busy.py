"""Brute force with default settings, the whole job as ``plan`` simulates it: the efficiency
``plan`` predicts on many ranks (the simulated wall on one rank over ranks x the simulated wall
on N: start-up, calibration and confirmation included), for every cache of the given folders,
and the CPU seconds each ``plan`` command took.

    PYTHONPATH=. python benchmarks/plan_busy.py ../shared/data/caches ../shared/data/validation [--ranks 64,256]
        [--kernel-cache shared|node|off]

Each cache is one real ``python -m mpitune plan CACHE --strategy brute_force --ranks ... --json``
(it always simulates one rank too); its CPU time is the child process's user + system seconds.
The last lines name the worst cache on the largest rank count and the largest CPU time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from mpitune.spec.replay import KERNEL_CACHE_REACHES


def plan(cache: Path, ranks: str, kernel_cache: str | None = None) -> tuple[dict[int, float], float, float]:
    """Efficiency by rank count, CPU seconds and wall seconds of one ``plan``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "mpitune", "plan", str(cache), "--strategy", "brute_force"]
    if kernel_cache is not None:
        command += ["--kernel-cache", kernel_cache]
    done = subprocess.run([*command, "--ranks", ranks, "--json"], capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"plan failed on {cache}: {done.stderr.strip()}")
    rows = json.loads(done.stdout)["ranks"]
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {int(r["ranks"]): float(r["efficiency"]) for r in rows}, cpu_s, wall_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of Kernel Tuner caches (*.json.gz)")
    parser.add_argument("--ranks", default="64,256", help="rank counts (default 64,256)")
    parser.add_argument(
        "--kernel-cache",
        choices=KERNEL_CACHE_REACHES,
        help="plan's --kernel-cache (default: as this machine's kernel cache folder is)",
    )
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.ranks.split(",")]
    reach = f" --kernel-cache {args.kernel_cache}" if args.kernel_cache else ""
    print(f"command: python benchmarks/plan_busy.py {' '.join(map(str, args.folders))} --ranks {args.ranks}{reach}")
    print("| cache | " + " | ".join(f"{n} ranks" for n in counts) + " | CPU s | wall s |")
    print("|---|" + "---|" * (len(counts) + 2))
    worst: tuple[float, str] = (2.0, "")
    costliest: tuple[float, str] = (0.0, "")
    for folder in args.folders:
        for cache in sorted(folder.glob("*.json.gz")):
            efficiency, cpu_s, wall_s = plan(cache, args.ranks, args.kernel_cache)
            cells = " | ".join(f"{100 * efficiency[n]:.1f} %" for n in counts)
            name = f"{folder.name}/{cache.name.split('.')[0]}"
            print(f"| {name} | {cells} | {cpu_s:.1f} | {wall_s:.1f} |", flush=True)
            worst = min(worst, (efficiency[counts[-1]], name))
            costliest = max(costliest, (cpu_s, name))
    print(f"worst on {counts[-1]} ranks: {worst[1]}, {100 * worst[0]:.1f} %")
    print(f"most CPU: {costliest[1]}, {costliest[0]:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
