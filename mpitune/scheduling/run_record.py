"""The run's record in the file and the lines a person reads: rank 0 opens the file and records
the run (``open_run``), says each hand-out's progress (``progress_line``), and records and says
how the run ended (``finish``). No MPI here: run.py gathers what these need."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mpitune import __version__
from mpitune.errors import UserError
from mpitune.exits import ExitCode
from mpitune.model.objective import Objective
from mpitune.model.timeline import Clock, Timeline
from mpitune.scheduling.handouts import Policy
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, StopReason
from mpitune.store.cache import WRITE_WITHIN_S, Cache, RunInfo

if TYPE_CHECKING:
    from mpitune.scheduling.devices.models import Peers


def say(*lines: str) -> None:
    """Progress for a person: rank 0 only, on stdout, apart from the diagnostic log; several lines
    in one write."""
    print("\n".join(f"mpitune: {line}" for line in lines), flush=True)


def open_run(
    setup: Setup,
    placements: Sequence[Placement],
    clock: Clock,
    started_unix: float,
    command: str,
    peers: Peers | None = None,
) -> tuple[Manager | None, str | None]:
    """Open (or resume) the cache and record the run; an error string if the cache refuses.
    ``peers``: the job's other device models, where it spans several (devices/models.py)."""
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
            problem.kernel.tune_params,
            problem.kernel.iterations,
            Objective.of(problem.aim, problem.kernel.observed_names, problem.kernel.observed_aliases),
            write_within_s=WRITE_WITHIN_S,
        )
    except UserError as exc:
        return None, f"{problem.kernel.spec_path}: cache: {exc}"
    in_turn = not any(p.compile_workers for p in placements)
    manager = Manager(setup, cache, hosts, devices, clock, compiles_in_turn=in_turn, peers=peers)
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
        f"tuning {problem.kernel.kernel_name} ({problem.kernel.lang}) on {len(hosts)} rank(s): {len(setup.space)} "
        f"configurations, {manager.known} already in {settings.cache_path}, strategy {settings.strategy}, "
        f"{policy.dealing.describe()}, {_workers_text(tuple(p.compile_workers for p in placements))}"
    )
    for source in setup.prior.sources if setup.prior is not None else ():
        say(
            f"prior {source.path}: {source.device_name or 'an unnamed device'}, problem size {source.problem_size}, "
            f"times for {source.matched} of the {len(setup.space)} configurations, "
            f"matched on {', '.join(source.shared)}"
        )
    if problem.kernel.replay is not None:
        say(problem.kernel.replay.run.describe())
    if cache.interrupted:
        how = "ended when a rank stopped answering" if cache.last_status == "silent_rank" else "was killed"
        say(f"the previous run {how} while {cache.interrupted}; they are not recorded and may be measured again")
    return manager, None


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


def describe_best(manager: Manager) -> str:
    """The best result so far and its configuration, as the progress and closing lines show it."""
    if manager.best is None:
        return "none yet"
    return f"{manager.objective.describe(manager.best)} {format_config(manager.space.config(manager.best.config_id))}"


def progress_line(manager: Manager) -> str:
    """What a person reads after each hand-out: how far, the best so far and the rate. After the
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
