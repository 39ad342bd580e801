"""What one ``python -m mpitune plan`` costs: CPU seconds, wall seconds and peak memory of the
process, for the default rank counts and for each count given (each with the one-rank replay plan
always makes), and how long a count past ``MAX_RANKS`` takes to be refused.

    PYTHONPATH=. python benchmarks/plan_cost.py ../shared/data/caches/gemm_RTX_3090.json.gz --ranks 1000 4096

Each is one real child process, its resources from ``os.wait4``: its own, not the sum of all.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def measured(argv: list[str]) -> tuple[int, float, float, float, str]:
    """Exit code, CPU seconds, wall seconds, peak resident MB and the last line of stderr."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "mpitune", "plan", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    last = (err.strip().splitlines() or [""])[-1]
    return child.returncode, usage.ru_utime + usage.ru_stime, wall_s, usage.ru_maxrss / 1024, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", help="measured data (a Kernel Tuner cache or an mpitune file)")
    parser.add_argument("--ranks", nargs="*", default=["1000", "4096"], help="rank counts, each a plan of its own")
    args = parser.parse_args(argv)
    print(f"command: python benchmarks/plan_cost.py {args.cache} --ranks {' '.join(args.ranks)}")
    print("| plan | exit | CPU s | wall s | peak MB |")
    print("|---|---|---|---|---|")
    for label, extra in [("default (1, 8, 64)", []), *((f"--ranks {n}", ["--ranks", n]) for n in args.ranks)]:
        code, cpu_s, wall_s, peak_mb, _ = measured([args.cache, *extra])
        print(f"| {label} | {code} | {cpu_s:.1f} | {wall_s:.1f} | {peak_mb:.0f} |", flush=True)
    code, cpu_s, wall_s, peak_mb, last = measured([args.cache, "--ranks", "10000000"])
    print(f"| --ranks 10000000 | {code} | {cpu_s:.1f} | {wall_s:.1f} | {peak_mb:.0f} |")
    print(f"its line: {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
