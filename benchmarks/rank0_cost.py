"""Rank 0's CPU cost per configuration, and the planner's, on measured data.

    python benchmarks/rank0_cost.py [CACHE_DIR] [--ranks 2] [--plan-ranks 64,256] [--skip-plan]

Two figures, each from a fresh process, as a user runs them:

1. The whole process of a brute-force replay of ``dedispersion_A100.json.gz`` (11,130
   configurations) on ``--ranks`` ranks under the venv's ``mpiexec`` (MPICH; the one on PATH
   when the venv has none): the launcher's wall time, start-up and file writes included,
   divided by the configurations. Rank 0 decides, writes and keeps the other ranks fed while
   they replay in simulated time, so this is its cost per configuration (goal: at most 400 µs).
2. The CPU seconds (user + sys of the child, ``resource.getrusage(RUSAGE_CHILDREN)``) of
   ``python -m mpitune plan gemm_RTX_3090.json.gz --ranks 64,256 --strategy brute_force``
   (17,956 configurations), which simulates the run on 1, 64 and 256 ranks in one process
   (goal: at most 60 s in all).

CACHE_DIR holds the Kernel Tuner caches (default: the shared caches beside the repository,
../shared/data/caches). The replay's results go to a temporary folder. Each command is printed
before it runs. Run it from the repository root.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED_CACHES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "caches"
REPLAYED = ("dedispersion_A100.json.gz", 11130)
PLANNED = "gemm_RTX_3090.json.gz"


def mpiexec() -> str:
    """The venv's mpiexec (the MPICH that mpi4py was built against), else the one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec") or "mpiexec"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (its processes' user + sys) of ``command``, which must succeed."""
    print("$ " + shlex.join(command), flush=True)
    cpu_s, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout}")
    return wall_s, children_cpu_s() - cpu_s


def replay_cost(caches: Path, ranks: int) -> None:
    name, configs = REPLAYED
    with tempfile.TemporaryDirectory(prefix="rank0-cost-") as workdir:
        out = os.path.join(workdir, "replay.h5")
        command = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", "replay", str(caches / name)]
        wall_s, cpu_s = run(command + ["--strategy", "brute_force", "--out", out])
    print(
        f"replay of {name} on {ranks} ranks: {wall_s:.2f} s wall, {1e6 * wall_s / configs:.0f} µs per "
        f"configuration (whole process; goal <= 400), {cpu_s:.2f} s CPU of all ranks"
    )


def plan_cost(caches: Path, ranks: str) -> None:
    command = [sys.executable, "-m", "mpitune", "plan", str(caches / PLANNED), "--ranks", ranks]
    wall_s, cpu_s = run(command + ["--strategy", "brute_force"])
    print(f"plan of {PLANNED} for ranks {ranks}: {cpu_s:.1f} s CPU (user + sys; goal <= 60), {wall_s:.1f} s wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches", nargs="?", type=Path, default=SHARED_CACHES, help="the Kernel Tuner caches")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the replay (default 2)")
    parser.add_argument("--plan-ranks", default="64,256", help="the plan's --ranks (default 64,256)")
    parser.add_argument("--skip-plan", action="store_true", help="time the replay alone")
    args = parser.parse_args()
    for name in (REPLAYED[0], PLANNED):
        if not (args.caches / name).is_file():
            sys.exit(f"{args.caches / name}: no such cache (name the folder that holds it)")
    replay_cost(args.caches, args.ranks)
    if not args.skip_plan:
        plan_cost(args.caches, args.plan_ranks)


if __name__ == "__main__":
    main()
