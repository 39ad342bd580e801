"""What ``python -m mpitune plan`` rests on: a measured run's file, or a spec and its costs.

A spec's costs come from a short pilot on this machine, or from a measured run of the same kernel
elsewhere (``--prior FILE``). From a spec, the replay covers its whole space and budget. What was
not measured gets predicted costs (cli/predicted.py). The table says how far they held on the
measured ones."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from mpitune.cli.loading import read_measured
from mpitune.errors import UserError
from mpitune.model.result import Status
from mpitune.scheduling.messages import StopReason
from mpitune.spec.replay import MeasuredSpace, kernel_cache_assumed
from mpitune.spec.settings import Overrides
from mpitune.store.measured import MeasuredData

PILOT_CONFIGS = 16  # a pilot's configurations by default: its batches' start-up and costs, in seconds
DEFAULT_RANKS = (1, 8, 64)
# Every simulated rank replays in plan's one process, and rank 0's each report scans the ranks:
# a plan of this many on the largest shared cache (17,956 configurations) takes minutes
# (docs/performance.md, "What plan costs"). Jobs of more GPUs than this are not tuning jobs.
MAX_RANKS = 4096
_ENDED = (StopReason.FINISHED.value, StopReason.MAX_FEVALS.value)  # a search that ended on its own
PILOT_STOP_S = 10.0  # a pilot told to stop (SIGTERM) has this long to finish its configuration


@dataclass(frozen=True)
class Basis:
    """The measured (or filled-in) data to replay, and its settings.

    ``rests_on``: the table's line of what the prediction rests on. ``error``: the cost model's
    cross-validated error (None: no model, or too few passed to tell). ``predicted``: whether any
    configuration's costs are predicted. ``target``: what the sbatch line tunes. ``racing``: the
    spec's, where the data does not record how its run raced (a Kernel Tuner cache)."""

    data: MeasuredSpace
    given: Overrides
    strategy: str | None
    strategy_options: Any
    rests_on: str
    error: float | None
    predicted: bool
    target: str
    ranks: tuple[int, ...]  # the rank counts to plan (``rank_counts``)
    racing: Any = None  # as replay_problem's: None races as the data's run raced


def rank_counts(asked: list[tuple[int, ...]] | None, configurations: int, what: str) -> tuple[int, ...]:
    """The rank counts to plan: those asked (``--ranks``), else the defaults not above them.

    Each asked count is at most the ``configurations`` the search hands out, else one line says
    so. A rank past them would measure nothing. ``what``: where the configurations come from, for
    that line."""
    if asked is None:
        return tuple(n for n in DEFAULT_RANKS if n <= configurations)
    counts = tuple(dict.fromkeys(n for part in asked for n in part))
    over = [n for n in counts if n > configurations]
    if over:
        raise UserError(
            f"--ranks {over[0]:,}: more ranks than the {configurations:,} configurations {what}: the ranks "
            f"past {configurations:,} would have nothing to measure"
        )
    return counts


def basis(args: argparse.Namespace, workdir: str) -> Basis:
    if not args.file.endswith(".py"):
        if args.prior or args.pilot is not None or args.pilot_out:
            raise UserError("--pilot, --pilot-out and --prior plan from a spec (SPEC.py), not from a results file")
        data = read_measured(args.file)
        held = len(data.configs)
        share = _share(args.file, data, args.max_fevals)
        configurations = min(held, args.max_fevals or held)
        what = f"{args.file} holds" if configurations == held else f"of --max-fevals {configurations}"
        ranks = rank_counts(args.ranks, configurations, what)
        schedule = args.schedule or "auto"  # a plan predicts with the default, not as the run handed out
        given = Overrides(max_fevals=args.max_fevals, compile_workers=args.compile_workers, schedule=schedule)
        rests_on = f"{args.file}: {share}{kernel_cache_assumed(data.recorded, args.kernel_cache).describe()}"
        return Basis(data, given, args.strategy, None, rests_on, None, False, "SPEC", ranks)
    return _from_spec(args, workdir)


def _share(path: str, data: MeasuredSpace, max_fevals: int | None) -> str:
    """What share of its search space a run's file holds, for the table's line.

    '' for all of it, or for a Kernel Tuner cache, which does not say. A run stopped short holds
    part of what its search was to measure: by a signal, its time limit, or killed. A plan of that
    part alone would ask for too little. So it is refused, unless ``--max-fevals`` asks for a run
    of at most as many as the file holds."""
    searched = data.searched if isinstance(data, MeasuredData) else None
    held = len(data.configs)
    if searched is None or held >= searched.space_size:
        return ""
    ended = searched.status in _ENDED
    why = "its search ended there" if ended else _stopped(searched.status)
    share = f"{held:,} of the {searched.space_size:,} configurations of its search space ({why})"
    if ended:
        return f"{share}; "
    if max_fevals is None or max_fevals > held:
        asked = "plans only those" if max_fevals is None else f"cannot plan --max-fevals {max_fevals:,} from them"
        raise UserError(
            f"{path} holds {share}: a plan from it {asked}; `plan SPEC.py --prior {path}` plans the whole space "
            f"from their costs, --max-fevals {held} a run of {held}"
        )
    return f"{share}, a run of {max_fevals:,} of them as asked; "


def _stopped(status: str) -> str:
    """How a run that did not end on its own ended, as its status says."""
    if status == "running":
        return "its last run was killed"
    return f"its last run stopped early: {status}"


def _from_spec(args: argparse.Namespace, workdir: str) -> Basis:
    from mpitune.cli.predicted import fill_in
    from mpitune.scheduling.prepare import prepare
    from mpitune.spec.load import load_spec
    from mpitune.store import measured

    if args.prior and (args.pilot is not None or args.pilot_out):
        raise UserError("--prior gives the costs instead of a pilot: --pilot and --pilot-out go without it")
    asked = Overrides(strategy=args.strategy, max_fevals=args.max_fevals)
    problem, settings = load_spec(args.file, asked, read_measured)
    if problem.kernel.replay:
        raise UserError(f"{args.file} replays {problem.kernel.replay.path} (simulation_mode): plan from that file")
    space = prepare(problem, settings).space
    configurations = min(len(space), settings.max_fevals or len(space))
    what = "of the spec's space" if configurations == len(space) else f"of its budget (max_fevals {configurations})"
    ranks = rank_counts(args.ranks, configurations, what)  # before a pilot, which takes a while
    if args.prior:
        source = args.prior
        data = measured.load(source)
        where = f"{source}, measured on {data.device_name or 'an unnamed device'}"
    else:
        source = args.pilot_out or os.path.join(workdir, "pilot.h5")
        configs = PILOT_CONFIGS if args.pilot is None else args.pilot
        where = _pilot(args.file, configs, settings.strategy, source, bool(args.pilot_out))
        data = _piloted(source, args.pilot_out)
        where += f" on this machine ({data.device_name or 'an unnamed device'})"
    filled = fill_in(space, data, problem.kernel.iterations, os.path.join(workdir, "filled.json"))
    given = Overrides(
        max_fevals=settings.max_fevals,
        time_limit_s=settings.time_limit_s,
        seed=settings.seed,
        batch_size=settings.batch_size,
        compile_workers=settings.compile_workers if args.compile_workers is None else args.compile_workers,
        confirm=settings.confirm,
        calibrate=settings.calibrate,
        schedule=args.schedule or settings.schedule.value,
    )
    rests_on = (
        f"{args.file}: {len(space)} configurations, costs of {filled.measured} from {where}, "
        f"the other {len(space) - filled.measured} predicted from them; {data.recorded.describe()}"
    )
    return Basis(
        filled.data,
        given,
        settings.strategy,
        settings.strategy_options,
        rests_on,
        filled.error,
        filled.measured < len(space),
        args.file,
        ranks,
        None if data.recorded.complete else settings.racing,
    )


def _piloted(source: str, kept: str | None) -> MeasuredData:
    """What the pilot measured, of which one configuration at least passed.

    Else one line says why none did: the first error. It names the pilot's file only where it is kept."""
    from mpitune.store import measured

    data = measured.load(source)
    statuses = [m.status for m in data.measurements]
    if Status.OK in statuses:
        return data
    first = next((m.error for m in data.measurements if m.error.strip()), "no error recorded")
    # The compiler's first line, without the pilot's build folder, which is gone by now.
    error = re.sub(r"(?<!\S)/\S*/(?=[^/\s]+:\d)", "", next(ln.strip() for ln in first.splitlines() if ln.strip()))[:300]
    n = len(statuses)
    if all(s == Status.COMPILE_ERROR for s in statuses):
        failed = f"all {n} configurations of the pilot failed to compile"
    else:
        counted = ", ".join(f"{statuses.count(s)} {s.value}" for s in dict.fromkeys(statuses))
        failed = f"none of the {n} configurations of the pilot passed ({counted})"
    raise UserError(f"{failed}{f' (kept in {kept})' if kept else ''}: {error}")


def _pilot(spec: str, configs: int, strategy: str, out: str, kept: bool) -> str:
    """Tune ``configs`` configurations of the spec on this machine, into ``out``.

    One rank runs, on its real backend, with its progress lines on stderr. Returns what it
    measured, for the table."""
    if configs < 1:
        raise UserError(f"--pilot {configs}: a pilot measures at least 1 configuration")
    if os.path.exists(out):
        raise UserError(f"{out} exists: plan {spec} --prior {out} plans from it, or name another --pilot-out")
    command = [sys.executable, "-m", "mpitune", "tune", spec, "--max-fevals", str(configs)]
    command += ["--strategy", strategy, "--out", out]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pilot:
        assert pilot.stdout is not None
        last = ""
        try:
            for line in pilot.stdout:
                sys.stderr.write(line if kept else line.replace(out, "a temporary file"))
                last = line.strip() or last
        except BaseException:  # Ctrl-C or SIGTERM: the pilot stops too, and keeps what it measured
            _stop(pilot)
            raise
    if pilot.returncode != 0:
        raise UserError(f"the pilot run of {spec} ended with exit code {pilot.returncode}: {last}")
    from mpitune.store.reader import read

    run = read(out)
    if not len(run.results):
        raise UserError(f"the pilot run of {spec} measured no configuration: {last}")
    batches = len(set(run.results["batch"].tolist()))
    wall_s = float(run.timeline["end_s"].max()) if len(run.timeline) else 0.0
    return (
        f"a pilot of {len(run.results)} configurations in {batches} batches (1 rank, strategy {strategy}, "
        f"{wall_s:.1f} s{f', kept in {out}' if kept else ''})"
    )


def _stop(pilot: subprocess.Popen[str]) -> None:
    """SIGTERM, as Slurm stops a run: it finishes its configuration and writes it. It is killed
    if it has not ended within ``PILOT_STOP_S``."""
    pilot.terminate()
    try:
        pilot.wait(PILOT_STOP_S)
    except subprocess.TimeoutExpired:
        pilot.kill()
        pilot.wait()
