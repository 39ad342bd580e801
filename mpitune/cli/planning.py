"""``python -m mpitune plan FILE|SPEC.py --ranks 1,8,64``: how many GPUs, and how long, to ask
Slurm for.

Each rank count is a replay on the replay's simulated clock (scheduling/run.py, ``simulate``).
docs/performance.md measures its fidelity. The replay is of a measured run's file, or of a spec's
whole space and budget. A spec's configurations cost what a short pilot on this machine measured,
or a measured run of the same kernel elsewhere (``--prior``; cli/plan_basis.py). The table says
what the prediction rests on and how far to trust it. Its ``--time`` leaves a margin for that.

Every simulated rank lives in this one process and shares one load of the measured data
(``measured.load_shared``). What each costs beyond that grows with the rank count. So the counts
are bounded: ``MAX_RANKS``, and no more ranks than configurations to measure. Ctrl-C and SIGTERM
end a plan with one line. Its temporary folder is removed, and a pilot it started is stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any

from mpitune.cli.parsers import Parser, common, kernel_cache_flag
from mpitune.cli.plan_basis import DEFAULT_RANKS, MAX_RANKS, PILOT_CONFIGS, basis
from mpitune.cli.verbs import PLAN_HELP
from mpitune.errors import UserError
from mpitune.exits import ExitCode
from mpitune.model.problem import Schedule
from mpitune.store.measured import MeasuredData

# Seconds a job stops before its limit: the job scripts' warning (--signal=B:USR1@90, docs/slurm.md).
DRAIN_S = 90.0
SAFETY = 1.25  # --time asks this much more than the prediction (and 5 minutes more), for its error
SAFETY_S = 300.0
_AGAIN_S = 0.05  # a signal a finaliser swallowed is delivered again this much later
UNKNOWN_ERROR = 1.0  # the predicted costs' error where too few were measured to tell: --time doubles


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
        description=PLAN_HELP[0].upper() + PLAN_HELP[1:] + ": each a replay on the simulated clock.",
    )
    p.add_argument(
        "file",
        metavar="FILE|SPEC.py",
        help="an mpitune results file of a real run (or a Kernel Tuner cache), or a spec (.py) to plan from a pilot",
    )
    p.add_argument(
        "--ranks",
        type=_ranks,
        nargs="+",
        metavar="N,N,...",
        help=f"rank counts, at most {MAX_RANKS:,} and the configurations to measure "
        f"(default {','.join(map(str, DEFAULT_RANKS))}, those of them not above the configurations)",
    )
    p.add_argument("--strategy", help="the search strategy (default: as replay's)")
    p.add_argument("--max-fevals", type=int, help="at most this many configurations")
    p.add_argument("--compile-workers", type=int, metavar="N", help="per rank (default: as the run had)")
    p.add_argument(
        "--schedule",
        choices=[s.value for s in Schedule],
        help="how rank 0 hands out work (default: a spec's schedule, else auto: refill on several ranks)",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=1,
        metavar="G",
        help="GPUs (ranks) per node (default 1, as most of DAS-6's)",
    )
    p.add_argument(
        "--pilot",
        type=int,
        metavar="N",
        help=f"a spec's pilot: tune N configurations on this machine first (default {PILOT_CONFIGS})",
    )
    p.add_argument("--pilot-out", metavar="FILE", help="keep the pilot's results in FILE (default: a temporary)")
    p.add_argument("--prior", metavar="FILE", help="a spec's costs from this run of the same kernel, not a pilot")
    kernel_cache_flag(p)
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
    if max(counts) > MAX_RANKS:
        raise argparse.ArgumentTypeError(
            f"{max(counts):,} ranks: plan simulates every rank in this one process, at most {MAX_RANKS:,} "
            '(docs/performance.md, "What plan costs")'
        )
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


def time_margin(error: float | None, predicted: bool) -> float:
    """How many times the prediction ``--time`` asks for, 5 minutes more aside.

    It is ``SAFETY``. Where costs are predicted, the cost model's cross-validated error comes on
    top. Where that error could not be told, the margin is doubled."""
    if not predicted:
        return SAFETY
    return SAFETY * (1 + (UNKNOWN_ERROR if error is None else error))


def sbatch(
    ranks: int,
    wall_s: float,
    jobs: int,
    per_job_s: float | None,
    gpus_per_node: int,
    times: float = SAFETY,
    target: str = "SPEC",
) -> str:
    """The sbatch line of one job: nodes, tasks and GPUs per node, and its time with the margin.
    The time is ``times`` the prediction, or the job's limit when the run needs several jobs."""
    per_node = min(ranks, gpus_per_node)
    ask_s = per_job_s if jobs > 1 and per_job_s else wall_s * times + SAFETY_S
    minutes = math.ceil(ask_s / 60)
    return (
        f"sbatch -N {math.ceil(ranks / per_node)} --ntasks-per-node={per_node} --gres=gpu:{per_node} "
        f"--time={minutes // 60}:{minutes % 60:02d}:00 jobscripts/das6.sh {target}"
    )


class _Terminated(BaseException):
    """SIGTERM, raised where the plan is, so that every ``finally`` runs: the temporary folder's
    removal, a pilot's stop. It is no Exception, which code between could swallow."""


@contextmanager
def _terminable() -> Iterator[None]:
    """SIGTERM raises ``_Terminated`` and SIGINT ``KeyboardInterrupt`` while the plan runs.

    One that lands in a finaliser (a weak reference's callback) is only printed there. The plan
    would go on. So it is delivered again, quietly, a moment later. The previous handlers are put
    back."""
    raised = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: _Terminated}
    active = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        raise raised[signal.Signals(signum)]

    def again(signum: signal.Signals) -> None:
        if active.is_set():
            signal.raise_signal(signum)

    def unraisable(hook: Any) -> None:
        swallowed = [s for s, kind in raised.items() if hook.exc_type is kind]
        if swallowed and active.is_set():
            threading.Timer(_AGAIN_S, again, (swallowed[0],)).start()
        else:
            previous_hook(hook)

    previous = {s: signal.signal(s, handler) for s in raised}
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    active.set()
    try:
        yield
    finally:
        active.clear()
        sys.unraisablehook = previous_hook
        for s, old in previous.items():
            signal.signal(s, old)


def plan(argv: list[str]) -> int:
    """The plan, or one line: a user error (``USER_ERROR``), Ctrl-C (``INTERRUPTED``) or SIGTERM.
    After SIGTERM the process ends by SIGTERM itself, as a parent expects of a process it ended."""
    args = parser().parse_args(argv)
    try:
        with _terminable():
            return _plan(args)
    except UserError as exc:
        print(f"mpitune: error: {exc}", file=sys.stderr)
        return ExitCode.USER_ERROR
    except KeyboardInterrupt:
        print(
            f"mpitune: plan: interrupted: nothing planned{_kept(args)} (exit code {ExitCode.INTERRUPTED.value})",
            file=sys.stderr,
        )
        return ExitCode.INTERRUPTED
    except _Terminated:
        print(f"mpitune: plan: ended by SIGTERM: nothing planned{_kept(args)}", file=sys.stderr)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        raise  # not reached: SIGTERM's default ends the process


def _kept(args: argparse.Namespace) -> str:
    """What an ended plan leaves: its temporary files never, a kept pilot's results (--pilot-out)."""
    if args.pilot_out and os.path.exists(args.pilot_out):
        return f"; what the pilot measured is kept in {args.pilot_out}"
    return ""


def _plan(args: argparse.Namespace) -> int:
    from mpitune.scheduling.run import simulate
    from mpitune.spec.replay import replay_problem

    walls, measured = {}, {}
    with tempfile.TemporaryDirectory(prefix="mpitune-plan-") as workdir:
        rests = basis(args, workdir)
        for ranks in sorted({1, *rests.ranks}):
            problem, settings = replay_problem(
                rests.data,
                rests.given,
                rests.strategy,
                rests.strategy_options,
                rests.racing,
                kernel_cache=args.kernel_cache,
            )
            simulated = simulate(problem, settings, ranks, workdir)
            walls[ranks], measured[ranks] = simulated.wall_s, simulated.measured
    times = time_margin(rests.error, rests.predicted)
    usable_s = None if args.time_per_job is None else args.time_per_job - DRAIN_S
    rows = []
    for ranks in rests.ranks:
        wall_s = walls[ranks]
        jobs = 1 if usable_s is None else max(1, math.ceil(wall_s / usable_s))
        line = sbatch(ranks, wall_s, jobs, args.time_per_job, args.gpus_per_node, times, rests.target)
        rows.append(Row(ranks, wall_s, walls[1] / (ranks * wall_s), ranks * wall_s / 3600, jobs, line))
    device = rests.data.device_name if isinstance(rests.data, MeasuredData) else ""
    uncertainty = _uncertainty(rests.error, rests.predicted, times) + _one_model(device)
    if args.json:
        rows_json = [asdict(r) for r in rows]
        document = {"ranks": rows_json, "configurations": measured[1], "rests_on": rests.rests_on}
        print(json.dumps({**document, "uncertainty": uncertainty}, indent=2))
        return 0
    print(f"plan for {args.file}, strategy {settings.strategy}, {measured[1]} configurations: {rests.rests_on}")
    print(f"{'ranks':>6} {'wall':>10} {'efficiency':>11} {'GPU-hours':>10} {'jobs':>5}  sbatch")
    for r in rows:
        print(
            f"{r.ranks:>6} {r.wall_s:>9.1f}s {100 * r.efficiency:>10.1f}% {r.gpu_hours:>10.3f} {r.jobs:>5}  {r.sbatch}"
        )
    print(f"uncertainty: {uncertainty}")
    return 0


def _one_model(device: str) -> str:
    """What the plan assumes of the ranks' devices: the file's model on every rank.

    A job over other models runs at their speed, and a job over several at each one's. No file of
    one model tells that. Under ``devices = "each"`` each model is a run of its own ranks, which
    its own file plans."""
    model = device or "the device the file was measured on"
    return (
        f"; every rank is taken to be a {model}: on other or mixed device models the times differ "
        "(a job with --devices each runs each model apart: plan each from a file of that model)"
    )


def _uncertainty(error: float | None, predicted: bool, times: float) -> str:
    from mpitune.cli.predicted import FOLDS

    asks = f"--time asks {times:.2f} x the prediction + {SAFETY_S / 60:g} min"
    if not predicted:
        return (
            "replays of real runs with their own settings came within 3 % of them (docs/performance.md); "
            f"other rank counts rest on the run's start-up and per-configuration records, and {asks}"
        )
    if error is None:
        told = "too few measured configurations passed to tell how far the predicted costs hold"
    else:
        told = (
            f"the cost model predicted the summed cost of held-out measured configurations within "
            f"{100 * error:.0f} % ({FOLDS}-fold cross-validation)"
        )
    return f"{told}; the clock itself came within 3 % of real runs (docs/performance.md); {asks}"
