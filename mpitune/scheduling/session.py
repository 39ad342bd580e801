"""Rank 0's start and end of a run: checking the input, opening the file and recording the
run, what rank 0 carries through the rounds and records of each batch, and the closing lines.
No MPI here: the loop gathers what these need."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune import __version__, strategies
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import SpecError, UserError
from mpitune.exits import ExitCode
from mpitune.model.objective import Objective
from mpitune.model.prior import NothingShared, Prior, PriorSource, align
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.restrictions import RestrictionError
from mpitune.model.searchspace import SearchSpace, SpaceTooLarge
from mpitune.model.timeline import Clock, Timeline
from mpitune.scheduling.faults.deadlines import Deadlines
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.handouts import Policy
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, StopReason
from mpitune.store.cache import WRITE_WITHIN_S, Cache, RunInfo
from mpitune.store.integrity import refuse_unusable


def say(*lines: str) -> None:
    """Progress for a person: rank 0 only, on stdout, separate from the diagnostic log; several
    lines in one write."""
    print("\n".join(f"mpitune: {line}" for line in lines), flush=True)


def refuse(rank: int, error: str) -> int:
    """End this rank for an error the user can fix; rank 0 alone says why."""
    if rank == 0:
        print(f"mpitune: error: {error}", file=sys.stderr, flush=True)
    return ExitCode.USER_ERROR


# What runs rank 0's ``prepare`` under a deadline (the command line's --load-timeout).
Deadline = Callable[[Callable[[], Setup]], Setup]


def prepare(problem: Problem, settings: RunSettings) -> Setup:
    """Everything that can be wrong with the user's input is found here, on rank 0."""
    try:
        # Before building the space, which may take long: a file that can never be the cache.
        refuse_unusable(settings.cache_path, problem.spec_path, problem.replay_source)
    except UserError as exc:
        raise SpecError(problem.spec_path, "cache", str(exc)) from None
    try:
        if problem.configs is None:
            space = SearchSpace.build(problem.tune_params, problem.restrictions)
        else:
            space = SearchSpace.from_configs(problem.tune_params, problem.configs).restricted(problem.restrictions)
    except RestrictionError as exc:  # a restriction that fails on some values
        raise SpecError(problem.spec_path, "restrictions", str(exc)) from None
    except SpaceTooLarge as exc:
        raise SpecError(problem.spec_path, "tune_params", str(exc)) from None
    if len(space) == 0:
        raise SpecError(problem.spec_path, "restrictions", "no configuration satisfies the restrictions")
    prior = read_prior(problem, settings, space)
    try:
        strategy = strategies.create(settings.strategy, space, settings.seed, settings.strategy_options, prior)
    except ValueError as exc:
        raise SpecError(problem.spec_path, "strategy_options", str(exc)) from None
    return Setup(problem, settings, space, strategy, prior)


def read_prior(problem: Problem, settings: RunSettings, space: SearchSpace) -> Prior | None:
    """The priors the settings name, on this space's ids (None: none); a prior that cannot be
    one is refused in one line naming its file: damaged, this run's own file, of another kernel
    (unless ``prior_any_kernel``), or sharing no parameter or configuration with the space.
    Reading one runs no code: it is data, read as a replay reads it."""
    if not settings.prior:
        return None
    from mpitune.store.measured import file_sha256, load  # reads JSON or HDF5: only when a prior is given

    sources, times = [], []
    for path in settings.prior:
        if path == settings.cache_path:
            raise SpecError(problem.spec_path, "prior", f"{path} is this run's own results file, not a prior")
        try:
            data, digest = load(path), file_sha256(path)
        except UserError as exc:
            raise SpecError(problem.spec_path, "prior", str(exc)) from None
        if data.kernel_name != problem.kernel_name and not settings.prior_any_kernel:
            raise SpecError(
                problem.spec_path,
                "prior",
                f"{path} measured kernel {data.kernel_name!r}, not {problem.kernel_name!r} "
                "(prior_any_kernel = True, or --prior-any-kernel, takes it all the same)",
            )
        try:
            shared, time_ms = align(space, data.tune_params, data.configs, data.prior_time_ms())
        except NothingShared as exc:
            raise SpecError(problem.spec_path, "prior", f"{path}: {exc}") from None
        matched = int(np.isfinite(time_ms).sum())
        size = json.dumps(data.problem_size, default=str)
        sources.append(PriorSource(path, data.kernel_name, data.device_name, size, shared, matched, digest))
        times.append(time_ms)
    return Prior(tuple(sources), tuple(times))


def open_run(
    setup: Setup, placements: Sequence[Placement], clock: Clock, started_unix: float, command: str
) -> tuple[Manager | None, str | None]:
    """Open (or resume) the cache and record the run; an error string if the cache refuses."""
    problem, settings = setup.problem, setup.settings
    hosts = tuple(p.host for p in placements)
    devices = tuple(p.device for p in placements)
    models = sorted(set(devices))
    if len(models) > 1 and not settings.allow_mixed_devices:
        by_model = "; ".join(f"{m}: ranks {', '.join(str(r) for r, d in enumerate(devices) if d == m)}" for m in models)
        return None, (
            f"the ranks have different devices ({by_model}); their timings are not comparable. "
            f"Start the job on one kind of device, or pass --allow-mixed-devices"
        )
    try:
        cache = Cache(
            settings.cache_path,
            problem.identity(models),
            problem.tune_params,
            problem.iterations,
            Objective.of(problem),
            write_within_s=WRITE_WITHIN_S,
        )
    except UserError as exc:
        return None, f"{problem.spec_path}: cache: {exc}"
    in_turn = not any(p.compile_workers for p in placements)
    manager = Manager(setup, cache, hosts, devices, clock, compiles_in_turn=in_turn)
    policy = Policy.of(settings, len(hosts), manager.batch_size, in_turn)
    cache.start_run(
        RunInfo(
            started_unix,
            len(hosts),
            settings.strategy,
            settings.seed,
            settings.max_fevals,
            settings.time_limit_s,
            manager.batch_size,
            len(setup.space),
            command,
            __version__,
            setup.prior.sources if setup.prior is not None else (),
            policy.dealing.schedule.value,
        ),
        hosts,
        devices,
        [p.pid for p in placements],
        [p.device_detail for p in placements],
    )
    say(
        f"tuning {problem.kernel_name} ({problem.lang}) on {len(hosts)} rank(s): {len(setup.space)} "
        f"configurations, {manager.known} already in {settings.cache_path}, strategy {settings.strategy}, "
        f"{policy.dealing.describe()}, {_workers_text(tuple(p.compile_workers for p in placements))}"
    )
    for source in setup.prior.sources if setup.prior is not None else ():
        say(
            f"prior {source.path}: {source.device_name or 'an unnamed device'}, problem size {source.problem_size}, "
            f"times for {source.matched} of the {len(setup.space)} configurations, "
            f"matched on {', '.join(source.shared)}"
        )
    if problem.replay_run is not None:
        say(problem.replay_run.describe())
    if cache.interrupted:
        how = "ended when a rank stopped answering" if cache.last_status == "silent_rank" else "was killed"
        say(f"the previous run {how} while {cache.interrupted}; they are not recorded and may be measured again")
    return manager, None


@dataclass(frozen=True)
class Rank0:
    """What rank 0 carries through the rounds: the search, the deadlines of its orders, and the
    watch its main thread shares with its heartbeat thread (faults/liveness.py)."""

    manager: Manager
    deadlines: Deadlines
    watch: Watch


def _workers_text(workers: tuple[int, ...]) -> str:
    if not any(workers):
        return "compiling in turn"
    if len(set(workers)) == 1:
        return f"{workers[0]} compile worker(s) per rank"
    return f"{min(workers)}-{max(workers)} compile workers per rank"


def finish(manager: Manager, timeline: Timeline) -> None:
    """Record how the run ended, close the file, and say what it found."""
    clock = timeline.clock
    reason = manager.stop_reason
    assert reason is not None, "a run finishes after rank 0 said stop"
    with timeline.phase("write"):
        manager.save_strategy()
        manager.cache.finish_run(clock.now(), reason.value, manager.measured)
    manager.cache.append_phases([(0, p) for p in timeline.take()])
    manager.cache.close()
    lost = manager.cache.lost  # the path was lost: the rows are beside it (store/custody.py)
    if lost is not None and reason is not StopReason.FILE_LOST:
        raise lost  # found in the last writes, the ranks told to stop for another reason: abort_for ends them
    verdict = manager.confirming.verdict
    if manager.best is None:
        say(f"no configuration passed ({manager.measured} measured in this run); see the cache for statuses")
    elif verdict is not None:  # the confirmed winner: its median over every rank's launches
        say(f"best: {verdict.winner_ms:.4g} ms {format_config(manager.space.config(verdict.winner))}")
    else:
        say(f"best: {describe_best(manager)}")
    kind = "simulated " if clock.simulated else ""
    where = "" if lost else f"; results in {manager.cache.path}"
    say(f"{manager.measured} configurations measured in {clock.now():.1f} {kind}s ({reason.value}){where}")
    for error in (manager.error, f"{lost} (exit code {ExitCode.CANNOT_WRITE.value})" if lost else ""):
        if error:
            print(f"mpitune: error: {error}", file=sys.stderr, flush=True)
    if reason.resumable:
        resume = f"run the same command again to resume (exit code {ExitCode.RESUMABLE.value})"
        say(f"stopped early ({reason.value}); {resume}")


def cpu_oversubscribed(caps: Capabilities, ranks_on_node: int, cores: int) -> str | None:
    """A warning when kernels timed on the CPU share too few cores: ranks then time each other's
    load, and one configuration's iterations spread over a factor of 20. None when all is well."""
    if ranks_on_node <= cores or caps.device is not DeviceKind.CPU:
        return None
    return (
        f"{ranks_on_node} ranks on this node timed {caps.lang} kernels on {cores} core(s), so the ranks took "
        f"cores from each other's timings; for times that mean something, run at most {cores} rank(s) per node"
    )


def describe_best(manager: Manager) -> str:
    """The best result so far and its configuration, as the progress and closing lines show it."""
    if manager.best is None:
        return "none yet"
    return f"{manager.objective.describe(manager.best)} {format_config(manager.space.config(manager.best.config_id))}"


def progress_line(manager: Manager) -> str:
    """What a person reads after each hand-out: how far, the best so far and the rate; after the
    confirmation, its verdict."""
    if manager.confirmed_last:
        return manager.confirming.describe(lambda i: format_config(manager.space.config(i)))
    total = len(manager.space)
    if manager.settings.max_fevals is not None:
        total = min(total, manager.known + manager.settings.max_fevals)
    done = manager.known + manager.measured
    elapsed_s = manager.clock.now()
    return (
        f"batch {manager.completed}: {done}/{total} configs, best {describe_best(manager)}, "
        f"{manager.measured / elapsed_s:.3g} configs/s, {elapsed_s:.1f} s"
    )


def format_config(config: Mapping[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in config.items()) + ")"
