"""``python -m mpitune plan FILE --ranks 1,8,64``: how many GPUs and how long to ask Slurm for, from
a measured run. Each rank count is a replay of the file on the replay's simulated clock
(scheduling/loop.py, ``simulate``), whose fidelity docs/performance.md measures; the table says what the
prediction rests on. Planning from a spec without results (a pilot) is not done yet."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from dataclasses import asdict, dataclass

from mpitune.cli.loading import read_measured
from mpitune.cli.parsers import PLAN_HELP, Parser, common
from mpitune.errors import UserError
from mpitune.exits import ExitCode

# Seconds a job stops before its limit: the job scripts' warning (--signal=B:USR1@90, docs/slurm.md).
DRAIN_S = 90.0
SAFETY = 1.25  # --time asks this much more than the prediction (and 5 minutes more), for its error
SAFETY_S = 300.0


@dataclass(frozen=True)
class Row:
    ranks: int
    wall_s: float
    efficiency: float
    gpu_hours: float
    jobs: int
    sbatch: str


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m mpitune plan",
        description=PLAN_HELP[0].upper() + PLAN_HELP[1:] + " (its replay on the simulated clock).",
    )
    p.add_argument("file", help="an mpitune results file of a real run (or a Kernel Tuner cache)")
    p.add_argument("--ranks", type=_ranks, default=(1, 8, 64), metavar="N,N,...", help="rank counts (default 1,8,64)")
    p.add_argument("--strategy", help="the search strategy (default: as replay's)")
    p.add_argument("--max-fevals", type=int, help="at most this many configurations")
    p.add_argument("--compile-workers", type=int, metavar="N", help="per rank (default: as the run had)")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=1,
        metavar="G",
        help="GPUs (ranks) per node (default 1, as most of DAS-6's)",
    )
    p.add_argument("--time-per-job", type=_duration, metavar="T", help="Slurm's limit per job: 15m, 1:30:00 or seconds")
    p.add_argument("--json", action="store_true", help='{"ranks": [{"ranks": N, "wall_s": ..., ...}]}')
    common(p)
    return p


def _ranks(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rank counts: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"rank counts are at least 1: {text!r}")
    return counts


def _duration(text: str) -> float:
    """Seconds of ``15m``, ``2h``, ``90s``, ``1:30:00``, ``30:00`` or ``900``."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if found:
        seconds = float(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[found.group(2)]
    elif re.fullmatch(r"\d+(:\d{1,2}){1,2}", text.strip()):
        seconds = float(sum(int(p) * 60**i for i, p in enumerate(reversed(text.strip().split(":")))))
    else:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (15m, 1:30:00 or seconds)")
    if not seconds > DRAIN_S:
        raise argparse.ArgumentTypeError(f"{text!r} leaves nothing after the {DRAIN_S:g} s a job drains before its end")
    return seconds


def sbatch(ranks: int, wall_s: float, jobs: int, per_job_s: float | None, gpus_per_node: int) -> str:
    """The sbatch line of one job: nodes, tasks and GPUs per node, and its time with the margin
    (the job's limit when the run needs several)."""
    per_node = min(ranks, gpus_per_node)
    ask_s = per_job_s if jobs > 1 and per_job_s else wall_s * SAFETY + SAFETY_S
    minutes = math.ceil(ask_s / 60)
    return (
        f"sbatch -N {math.ceil(ranks / per_node)} --ntasks-per-node={per_node} --gres=gpu:{per_node} "
        f"--time={minutes // 60}:{minutes % 60:02d}:00 jobscripts/das6.sh SPEC"
    )


def plan(argv: list[str]) -> int:
    from mpitune.scheduling.loop import simulate
    from mpitune.spec.replay import replay_problem
    from mpitune.spec.settings import Overrides

    args = parser().parse_args(argv)
    try:
        data = read_measured(args.file)
        given = Overrides(max_fevals=args.max_fevals, compile_workers=args.compile_workers)
        recorded = data.recorded
        walls = {}
        with tempfile.TemporaryDirectory(prefix="mpitune-plan-") as workdir:
            for ranks in sorted({1, *args.ranks}):
                problem, settings = replay_problem(data, given, args.strategy)
                walls[ranks] = simulate(problem, settings, ranks, workdir).wall_s
    except UserError as exc:
        print(f"mpitune: error: {exc}", file=sys.stderr)
        return ExitCode.USER_ERROR
    usable_s = None if args.time_per_job is None else args.time_per_job - DRAIN_S
    rows = []
    for ranks in args.ranks:
        wall_s = walls[ranks]
        jobs = 1 if usable_s is None else max(1, math.ceil(wall_s / usable_s))
        rows.append(
            Row(
                ranks,
                wall_s,
                walls[1] / (ranks * wall_s),
                ranks * wall_s / 3600,
                jobs,
                sbatch(ranks, wall_s, jobs, args.time_per_job, args.gpus_per_node),
            )
        )
    if args.json:
        print(json.dumps({"ranks": [asdict(r) for r in rows]}, indent=2))
        return 0
    print(f"plan for {args.file}, strategy {settings.strategy}: {recorded.describe()}")
    print(f"{'ranks':>6} {'wall':>10} {'efficiency':>11} {'GPU-hours':>10} {'jobs':>5}  sbatch")
    for r in rows:
        print(
            f"{r.ranks:>6} {r.wall_s:>9.1f}s {100 * r.efficiency:>10.1f}% {r.gpu_hours:>10.3f} {r.jobs:>5}  {r.sbatch}"
        )
    print(
        "uncertainty: replays of real runs with their own settings came within 3 % of them (docs/performance.md); "
        "other rank counts rest on the run's start-up and per-configuration records, and --time asks "
        f"{SAFETY:g} x the prediction + {SAFETY_S / 60:g} min"
    )
    return 0
