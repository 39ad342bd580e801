"""What ``python -m mpitune plan`` rests on: a measured run's file, or a spec and the costs of its
configurations, from a short pilot on this machine or a measured run of the same kernel elsewhere
(``--prior FILE``). From a spec, the replay covers its whole space and budget: what was not
measured gets predicted costs (cli/predicted.py), and the table says how far they held
on the measured ones."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from mpitune.cli.loading import read_measured
from mpitune.errors import UserError
from mpitune.spec.replay import MeasuredSpace
from mpitune.spec.settings import Overrides

PILOT_CONFIGS = 16  # a pilot's configurations by default: its batches' start-up and costs, in seconds


@dataclass(frozen=True)
class Basis:
    """The measured (or filled-in) data to replay and its settings. ``rests_on``: the table's
    line of what the prediction rests on; ``error``: the cost model's cross-validated error
    (None: no model, or too few passed to tell); ``predicted``: whether any configuration's costs
    are predicted; ``target``: what the sbatch line tunes; ``racing``: the spec's, where the data
    does not record how its run raced (a Kernel Tuner cache)."""

    data: MeasuredSpace
    given: Overrides
    strategy: str | None
    strategy_options: Any
    rests_on: str
    error: float | None
    predicted: bool
    target: str
    racing: Any = None  # as replay_problem's: None races as the data's run raced


def basis(args: argparse.Namespace, workdir: str) -> Basis:
    if not args.file.endswith(".py"):
        if args.prior or args.pilot is not None or args.pilot_out:
            raise UserError("--pilot, --pilot-out and --prior plan from a spec (SPEC.py), not from a results file")
        data = read_measured(args.file)
        schedule = args.schedule or "auto"  # a plan predicts with the default, not as the run handed out
        given = Overrides(max_fevals=args.max_fevals, compile_workers=args.compile_workers, schedule=schedule)
        rests_on = f"{args.file}: {data.recorded.describe()}"
        return Basis(data, given, args.strategy, None, rests_on, None, False, "SPEC")
    return _from_spec(args, workdir)


def _from_spec(args: argparse.Namespace, workdir: str) -> Basis:
    from mpitune.cli.predicted import fill_in
    from mpitune.scheduling.session import prepare
    from mpitune.spec.load import load_spec
    from mpitune.store import measured

    if args.prior and (args.pilot is not None or args.pilot_out):
        raise UserError("--prior gives the costs instead of a pilot: --pilot and --pilot-out go without it")
    asked = Overrides(strategy=args.strategy, max_fevals=args.max_fevals)
    problem, settings = load_spec(args.file, asked, read_measured)
    if problem.replay_source:
        raise UserError(f"{args.file} replays {problem.replay_source} (simulation_mode): plan from that file")
    space = prepare(problem, settings).space
    if args.prior:
        source = args.prior
        data = measured.load(source)
        where = f"{source}, measured on {data.device_name or 'an unnamed device'}"
    else:
        source = args.pilot_out or os.path.join(workdir, "pilot.h5")
        configs = PILOT_CONFIGS if args.pilot is None else args.pilot
        where = _pilot(args.file, configs, settings.strategy, source, bool(args.pilot_out))
        data = measured.load(source)
        where += f" on this machine ({data.device_name or 'an unnamed device'})"
    filled = fill_in(space, data, problem.iterations, os.path.join(workdir, "filled.json"))
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
        None if data.recorded.complete else settings.racing,
    )


def _pilot(spec: str, configs: int, strategy: str, out: str, kept: bool) -> str:
    """Tune ``configs`` configurations of the spec on this machine (one rank, its real backend)
    into ``out``, its progress lines on stderr; what it measured, for the table."""
    if configs < 1:
        raise UserError(f"--pilot {configs}: a pilot measures at least 1 configuration")
    if os.path.exists(out):
        raise UserError(f"{out} exists: plan {spec} --prior {out} plans from it, or name another --pilot-out")
    command = [sys.executable, "-m", "mpitune", "tune", spec, "--max-fevals", str(configs)]
    command += ["--strategy", strategy, "--out", out]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pilot:
        assert pilot.stdout is not None
        last = ""
        for line in pilot.stdout:
            sys.stderr.write(line)
            last = line.strip() or last
    if pilot.returncode != 0:
        raise UserError(f"the pilot run of {spec} ended with exit code {pilot.returncode}: {last}")
    from mpitune.store.reader import read

    run = read(out)
    batches = len(set(run.results["batch"].tolist()))
    wall_s = float(run.timeline["end_s"].max()) if len(run.timeline) else 0.0
    return (
        f"a pilot of {len(run.results)} configurations in {batches} batches (1 rank, strategy {strategy}, "
        f"{wall_s:.1f} s{f', kept in {out}' if kept else ''})"
    )
