"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures.

One round: rank 0 asks the strategy for a batch, cuts it into one chunk per rank and
scatters the chunks (ids only); each rank runs its chunk on its own backend; results and
timeline rows are gathered at rank 0, which writes them to the cache, tells the strategy
and prints a progress line. A chunk of ``None`` tells every rank to stop.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from . import __version__, backends, strategies
from .cache import Cache, RunInfo
from .comm import MPI, bcast_problem, first_error, start_clock
from .errors import SpecError, UserError
from .problem import Problem, RunSettings
from .result import Result
from .searchspace import SearchSpace
from .strategies.base import Strategy
from .timeline import Clock, Timeline
from .worker import run_chunk

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """What rank 0 alone holds: the validated spec, the space and the strategy."""

    problem: Problem
    settings: RunSettings
    space: SearchSpace
    strategy: Strategy


def prepare(problem: Problem, settings: RunSettings) -> Setup:
    """Everything that can be wrong with the user's input is found here, on rank 0."""
    try:
        backends.check(problem)
    except ValueError as exc:
        raise SpecError(problem.spec_path, "arguments", str(exc)) from None
    if problem.configs is None:
        space = SearchSpace.build(problem.tune_params, problem.restrictions)
    else:
        space = SearchSpace.from_configs(problem.tune_params, problem.configs).restricted(problem.restrictions)
    if len(space) == 0:
        raise SpecError(problem.spec_path, "restrictions", "no configuration satisfies the restrictions")
    try:
        strategy = strategies.create(settings.strategy, space, settings.seed, settings.strategy_options)
    except ValueError as exc:
        raise SpecError(problem.spec_path, "strategy_options", str(exc)) from None
    return Setup(problem, settings, space, strategy)


class Manager:
    """Rank 0's side of the loop: budget, strategy, cache and the progress a person reads."""

    def __init__(self, setup: Setup, cache: Cache, hosts: tuple[str, ...], devices: tuple[str, ...],
                 clock: Clock):
        self.setup, self.cache, self.clock = setup, cache, clock
        self.space, self.strategy, self.settings = setup.space, setup.strategy, setup.settings
        self.hosts, self.devices = hosts, devices
        self.ranks = len(hosts)
        self.batch_size = setup.settings.batch_size or self.ranks
        self.handed_out = 0
        self.measured = 0
        self.batch = -1
        self.stop_reason = ""
        known = cache.recorded()
        self.known = len(known)
        self.best: Result | None = None
        self._update_best(known)
        self.strategy.tell(known)

    def next_chunks(self) -> list[list[int] | None]:
        """One chunk of config ids per rank, or ``None`` for every rank when the run ends."""
        limit = self.settings.max_fevals
        n = self.batch_size if limit is None else min(self.batch_size, limit - self.handed_out)
        if limit is not None and n <= 0:
            self.stop_reason = "max_fevals"
        elif self.settings.time_limit_s is not None and self.clock.now() >= self.settings.time_limit_s:
            self.stop_reason = "time_limit"
        else:
            ids = self.strategy.ask(n)
            if ids:
                self.handed_out += len(ids)
                self.batch += 1
                # Interleaved, so neighbouring (similarly costly) configurations spread out.
                return [ids[r::self.ranks] for r in range(self.ranks)]
            self.stop_reason = "finished"
        return [None] * self.ranks

    def record(self, results: list[Result], phases) -> None:
        configs = [self.space.config(r.config_id) for r in results]
        self.cache.append(results, configs, self.hosts, self.devices, phases)
        self.measured += len(results)

    def tell(self, results: list[Result]) -> None:
        self.strategy.tell(results)
        self._update_best(results)

    def _update_best(self, results: list[Result]) -> None:
        for r in results:
            if r.ok and (self.best is None or r.time_ms < self.best.time_ms):
                self.best = r

    def progress_line(self) -> str:
        total = len(self.space)
        if self.settings.max_fevals is not None:
            total = min(total, self.known + self.settings.max_fevals)
        done = self.known + self.measured
        elapsed = self.clock.now()
        best = "none yet" if self.best is None else \
            f"{self.best.time_ms:.4g} ms {_format_config(self.space.config(self.best.config_id))}"
        return (f"batch {self.batch + 1}: {done}/{total} configs, best {best}, "
                f"{self.measured / elapsed:.3g} configs/s, {elapsed:.1f} s")


def _format_config(config: dict) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in config.items()) + ")"


def say(text: str) -> None:
    """Progress for a person: rank 0 only, on stdout, separate from the diagnostic log."""
    print(f"mpitune: {text}", flush=True)


def tune(load: Callable[[], tuple[Problem, RunSettings]], command: str = "", debug: bool = False) -> int:
    """Run one tuning job on every rank of COMM_WORLD; returns the exit code.

    ``load`` is called on rank 0 only and returns the checked problem and settings (from a
    spec file, or from measured data to replay).
    """
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    clock, started_unix = start_clock(comm)
    timeline = Timeline(clock)

    setup, error = None, None
    if rank == 0:
        with timeline.phase("startup"):
            try:
                setup = prepare(*load())
            except UserError as exc:
                log.debug("the input was refused", exc_info=debug)
                error = str(exc)
    with timeline.phase("wait"):
        error = comm.bcast(error, root=0)
    if error:
        return _refuse(rank, error)

    with timeline.phase("startup"):
        problem, indices = bcast_problem(comm, setup and setup.problem, setup and setup.space.indices)
    if problem.lang == "replay":
        # A replay's time is the measured time of the real run it stands for; the start-up
        # of the replay itself is no part of that.
        clock = Clock(simulated=True)
        timeline = Timeline(clock)
    with timeline.phase("startup"):
        space = SearchSpace(problem.tune_params, indices)
        workdir = tempfile.mkdtemp(prefix=f"mpitune-rank{rank}-")
        backend = None
        try:
            backend = backends.create(problem, workdir)
            backend.prepare()
        except UserError as exc:
            error = str(exc)
    try:
        with timeline.phase("wait"):
            error = first_error(comm, error)
            where = comm.gather((socket.gethostname(), backend and backend.device_name, os.getpid()), root=0)
        if error:
            return _refuse(rank, error)

        manager = None
        if rank == 0:
            with timeline.phase("startup"):
                manager, error = _open(setup, where, clock, started_unix, command)
        with timeline.phase("wait"):
            error = comm.bcast(error, root=0)
        if error:
            return _refuse(rank, error)

        _loop(comm, manager, backend, space, timeline)
        if rank == 0:
            _finish(manager, timeline)
        return 0
    finally:
        if backend is not None:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _open(setup: Setup, where: list[tuple], clock: Clock, started_unix: float,
          command: str) -> tuple[Manager | None, str | None]:
    """Open (or resume) the cache and record the run; an error string if the cache refuses."""
    hosts, devices, pids = zip(*where)
    problem, settings = setup.problem, setup.settings
    identity = problem.identity()
    identity["devices"] = sorted(set(devices))
    try:
        cache = Cache(settings.cache_path, identity, problem.tune_params, problem.iterations)
    except UserError as exc:
        return None, str(exc)
    manager = Manager(setup, cache, hosts, devices, clock)
    cache.start_run(RunInfo(started_unix, len(hosts), settings.strategy, settings.seed, settings.max_fevals,
                            settings.time_limit_s, manager.batch_size, len(setup.space), command, __version__),
                    hosts, devices, pids)
    say(f"tuning {problem.kernel_name} ({problem.lang}) on {len(hosts)} rank(s): {len(setup.space)} "
        f"configurations, {manager.known} already in {settings.cache_path}, strategy {settings.strategy}")
    return manager, None


def _loop(comm, manager: Manager | None, backend, space: SearchSpace, timeline: Timeline) -> None:
    while True:
        messages = None
        if manager:
            with timeline.phase("strategy"):
                chunks = manager.next_chunks()
                now = timeline.clock.now()
                messages = [None if c is None else (manager.batch, c, now) for c in chunks]
        with timeline.phase("wait"):
            message = comm.scatter(messages, root=0)
            if message is not None:
                timeline.clock.sync(message[2])
        if message is None:
            break
        batch, chunk, _ = message
        results = run_chunk(backend, space, chunk, comm.rank, batch, timeline)
        with timeline.phase("wait"):
            gathered = comm.gather((results, timeline.take(), timeline.clock.now()), root=0)
            if manager:
                timeline.clock.sync(max(now for _, _, now in gathered))
        if manager:
            results = [r for rank_results, _, _ in gathered for r in rank_results]
            phases = [(r, p) for r, (_, rows, _) in enumerate(gathered) for p in rows]
            with timeline.phase("write"):
                manager.record(results, phases)
            with timeline.phase("strategy"):
                manager.tell(results)
                say(manager.progress_line())
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    leftovers = comm.gather(timeline.take(), root=0)
    if manager:
        manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])


def _finish(manager: Manager, timeline: Timeline) -> None:
    clock = timeline.clock
    with timeline.phase("write"):
        manager.cache.finish_run(clock.now(), manager.stop_reason, manager.measured)
    manager.cache.append_phases([(0, p) for p in timeline.take()])
    manager.cache.close()
    if manager.best is None:
        say(f"no configuration passed ({manager.measured} measured in this run); see the cache for statuses")
    else:
        best = manager.best
        say(f"best: {best.time_ms:.4g} ms {_format_config(manager.space.config(best.config_id))}")
    kind = "simulated " if clock.simulated else ""
    say(f"{manager.measured} configurations measured in {clock.now():.1f} {kind}s ({manager.stop_reason}); "
        f"results in {manager.cache.path}")


def _refuse(rank: int, error: str) -> int:
    if rank == 0:
        print(f"mpitune: error: {error}", file=sys.stderr, flush=True)
    return 2
