"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures.

One round: rank 0 asks the strategy for a batch, cuts it into one chunk per rank and
scatters the chunks (ids only, in an ``Order``); each rank runs its chunk on its own backend
(in a supervised worker process, see isolation.py); results and timeline rows are gathered
at rank 0, which writes them to the cache, tells the strategy and prints a progress line.
An order without ids tells every rank to stop, and with which exit code.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from mpitune import __version__, backends, strategies
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import EXIT_RESUMABLE, EXIT_USER_ERROR, SpecError, UserError
from mpitune.model.kernel_extras import Derived
from mpitune.model.objective import Objective
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, Timeline
from mpitune.process.compile_ahead import CompileAhead, default_workers
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling.comm import MPI, bcast_problem, first_error, slurm_world_error, start_clock
from mpitune.scheduling.rank import run_chunk
from mpitune.store.cache import Cache, RunInfo
from mpitune.strategies.base import Strategy

log = logging.getLogger(__name__)

RESUMABLE = ("signal", "time_limit", "device_error")
# Configurations per rank in a batch by default: a strategy that knows its order in advance
# (brute force) gets chunks long enough for compile workers to stay ahead and for few
# gathers; one that learns from every result gets one each, so that it learns soonest.
PER_RANK_PREDICTABLE = 16
TAIL_SHARE = 2  # a guided batch takes at most 1/TAIL_SHARE of what is left


@dataclass
class Setup:
    """What rank 0 alone holds: the validated spec, the space and the strategy."""

    problem: Problem
    settings: RunSettings
    space: SearchSpace
    strategy: Strategy


def prepare(problem: Problem, settings: RunSettings) -> Setup:
    """Everything that can be wrong with the user's input is found here, on rank 0."""
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


@dataclass
class Order:
    """Rank 0's message to one rank each round: the ids of its chunk, or stop (``ids`` None)."""

    now_s: float  # rank 0's clock, to which a simulated clock catches up
    batch: int = -1
    ids: list[int] | None = None
    exit_code: int = 0
    derived: list[Derived] | None = None  # per id, what rank 0 resolved (kernel_extras.py)
    upcoming: list[int] = field(default_factory=list)  # this rank's likely next chunk, to compile ahead
    upcoming_derived: list[Derived] | None = None


def deal(ids: list[int], ranks: int, batch: int) -> list[list[int]]:
    """One chunk per rank: interleaved, so that neighbouring (similarly costly)
    configurations spread out, and rotated by batch, so that a parameter that alternates in
    id order (a cheap and a costly value) does not always land on the same rank."""
    chunks = [ids[r::ranks] for r in range(ranks)]
    shift = batch % ranks
    return chunks[shift:] + chunks[:shift]


class Manager:
    """Rank 0's side of the loop: budget, strategy, cache and the progress a person reads."""

    def __init__(self, setup: Setup, cache: Cache, hosts: tuple[str, ...], devices: tuple[str, ...],
                 clock: Clock):
        self.setup, self.cache, self.clock = setup, cache, clock
        self.space, self.strategy, self.settings = setup.space, setup.strategy, setup.settings
        self.hosts, self.devices = hosts, devices
        self.objective = cache.objective
        self.ranks = len(hosts)
        self.batch_size = setup.settings.batch_size or default_batch_size(self.ranks, self.strategy)
        # Chunks shrink towards the end of a search whose length is known, so that the last
        # batches, where ranks can only wait for the slowest, are short ("guided" scheduling).
        self._guided = setup.settings.batch_size is None and self.batch_size > self.ranks
        extras = setup.problem.extras
        self._derive = extras.derive if extras is not None and extras.varies else None
        self.handed_out = 0
        self.measured = 0
        self.batch = -1
        self.stop_reason = ""
        self.error = ""  # why a spec's callable stopped the run
        self._in_flight: set[int] = set()  # the ids of the batch being measured
        self.unmeasured: set[int] = set()  # handed out, never measured (see save_strategy)
        self.stop_requested = ""  # set by a signal handler: the job is about to be ended
        self.batch_s: list[float] = []
        self._batch_start_s = math.nan
        known = [self.objective.evaluate(r, self.space.config(r.config_id)) for r in cache.recorded()]
        cache.rewrite_metrics(known)  # metrics are derived: this run's definitions hold for every row
        self.known = len(known)
        self.best: Result | None = None
        self._update_best(known)
        self._resume_strategy(known)

    def _strategy_key(self) -> str:
        return json.dumps([self.settings.strategy, self.settings.seed, self.settings.strategy_options,
                           self.objective.name, self.objective.higher_is_better], sort_keys=True, default=str)

    def _resume_strategy(self, known: list[Result]) -> None:
        """Continue the search a stopped run saved (population, RNG, ...), if it was the same
        strategy with the same seed and options; else start afresh knowing the cache."""
        state = self.cache.load_strategy(self._strategy_key())
        if state is not None:
            self.strategy = pickle.loads(state)
            known = [r for r in known if r.config_id not in self.strategy.seen]
            log.info("resuming the saved state of strategy %s", self.settings.strategy)
        self.strategy.tell(known)

    def save_strategy(self) -> None:
        """Keep the strategy's state for a resumed run, unless configurations it handed out
        came back unmeasured (a rank lost its device mid-chunk): it counts them as seen and
        would never propose them again, so a resumed run starts it afresh from the cache."""
        state = b"" if self.unmeasured else pickle.dumps(self.strategy)
        self.cache.save_strategy(self._strategy_key(), state)

    def next_orders(self) -> list[Order]:
        """What every rank does next: a chunk of config ids each, or stop."""
        now = self.clock.now()
        if not math.isnan(self._batch_start_s):
            self.batch_s.append(now - self._batch_start_s)
        limit, time_limit = self.settings.max_fevals, self.settings.time_limit_s
        n = self._next_size()
        if not self.stop_requested and self.settings.stop_file and os.path.exists(self.settings.stop_file):
            self.stop_requested = "signal"
            log.warning("found %s: finishing, then stopping", self.settings.stop_file)
        if self.stop_requested:
            self.stop_reason = self.stop_requested
        elif limit is not None and n <= 0:
            self.stop_reason = "max_fevals"
        elif time_limit is not None and now + self._typical_batch_s() > time_limit:
            self.stop_reason = "time_limit"
        else:
            ids = self.strategy.ask(n)
            if ids:
                self.handed_out += len(ids)
                self._in_flight = set(ids)
                self.batch += 1
                self._batch_start_s = now
                chunks = deal(ids, self.ranks, self.batch)
                self.cache.hand_out(self.batch, chunks)
                upcoming = deal(self.strategy.upcoming(self._next_size()), self.ranks, self.batch + 1)
                try:
                    return [Order(now, self.batch, chunk, derived=self.derive(chunk), upcoming=next_chunk,
                                  upcoming_derived=self.derive(next_chunk))
                            for chunk, next_chunk in zip(chunks, upcoming)]
                except ValueError as exc:
                    self.stop_reason, self.error = "spec_error", f"{self.setup.problem.spec_path}: {exc}"
            else:
                self.stop_reason = "finished"
        return [Order(now, exit_code=exit_code(self.stop_reason))] * self.ranks

    def _next_size(self) -> int:
        """Configurations in the next batch: the batch size, within the budget, and in a
        guided search at most a 1/TAIL_SHARE share of what is left per rank."""
        limit = self.settings.max_fevals
        n = self.batch_size if limit is None else min(self.batch_size, limit - self.handed_out)
        if self._guided:
            left = len(self.space) - len(self.strategy.seen)
            if limit is not None:
                left = min(left, limit - self.handed_out)
            n = min(n, self.ranks * max(1, math.ceil(left / (self.ranks * TAIL_SHARE))))
        return n

    def derive(self, chunk: list[int]) -> list[Derived] | None:
        """What the spec's per-configuration callables give for each id (ValueError if one fails)."""
        if self._derive is None or not chunk:
            return None
        return [self._derive(self.space.config(i)) for i in chunk]

    def _typical_batch_s(self) -> float:
        """How long the next batch will likely take: the median of the last few."""
        return float(np.median(self.batch_s[-5:])) if self.batch_s else 0.0

    def record(self, results: list[Result], phases) -> None:
        configs = [self.space.config(r.config_id) for r in results]
        for r, config in zip(results, configs):
            self.objective.evaluate(r, config)
        self.cache.append(results, configs, self.hosts, self.devices, phases)
        self.measured += len(results)
        self.unmeasured |= self._in_flight - {r.config_id for r in results}

    def tell(self, results: list[Result]) -> None:
        self.strategy.tell(results)
        self._update_best(results)

    def _update_best(self, results: list[Result]) -> None:
        for r in results:
            if math.isfinite(r.score) and (self.best is None or r.score < self.best.score):
                self.best = r

    def progress_line(self) -> str:
        total = len(self.space)
        if self.settings.max_fevals is not None:
            total = min(total, self.known + self.settings.max_fevals)
        done = self.known + self.measured
        elapsed = self.clock.now()
        best = "none yet" if self.best is None else \
            f"{self.objective.describe(self.best)} {_format_config(self.space.config(self.best.config_id))}"
        return (f"batch {self.batch + 1}: {done}/{total} configs, best {best}, "
                f"{self.measured / elapsed:.3g} configs/s, {elapsed:.1f} s")


def exit_code(stop_reason: str) -> int:
    if stop_reason == "spec_error":
        return EXIT_USER_ERROR
    return EXIT_RESUMABLE if stop_reason in RESUMABLE else 0


def default_batch_size(ranks: int, strategy: Strategy) -> int:
    predictable = type(strategy).upcoming is not Strategy.upcoming
    return ranks * (PER_RANK_PREDICTABLE if predictable else 1)


def _workers_text(workers: tuple[int, ...]) -> str:
    if not any(workers):
        return "compiling in turn"
    if len(set(workers)) == 1:
        return f"{workers[0]} compile worker(s) per rank"
    return f"{min(workers)}-{max(workers)} compile workers per rank"


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
    rank = comm.rank
    error = slurm_world_error(comm)
    if error:
        return _refuse(int(os.environ.get("SLURM_PROCID", "0")), error)
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
        error, workers = comm.bcast((error, setup and setup.settings.compile_workers), root=0)
    if error:
        return _refuse(rank, error)

    with timeline.phase("startup"):
        problem, indices = bcast_problem(comm, setup and setup.problem, setup and setup.space.indices)
    caps = backends.capabilities(problem.lang)
    if caps.simulated_clock:
        # A replay's time is the measured time of the real run it stands for; the start-up
        # of the replay itself is no part of that.
        clock = Clock(simulated=True)
        timeline = Timeline(clock)
    with timeline.phase("startup"):
        space = SearchSpace(problem.tune_params, indices)
        workdir = tempfile.mkdtemp(prefix=f"mpitune-rank{rank}-")
        backend = None
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks of this node: which GPU is ours
        ahead = _compile_ahead(caps, node.size, workers, clock)
        try:
            if problem.isolate and caps.isolate:
                backend = IsolatedBackend(problem, workdir, clock, problem.timeout_s, node.rank)
            else:
                backend = backends.create(problem, workdir, node.rank)
                backend.prepare()
            if ahead is not None:
                ahead.compiler = backend.compiler()
        except UserError as exc:
            error = str(exc)
    try:
        with timeline.phase("wait"):
            error = first_error(comm, error)
            where = comm.gather((socket.gethostname(), backend and backend.device_name,
                                 backend and backend.device_detail, os.getpid(),
                                 ahead.workers if ahead else 0), root=0)
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

        with _stop_requests(manager):
            exit_code = _loop(comm, manager, backend, space, timeline, ahead)
        if rank == 0:
            _finish(manager, timeline)
        return exit_code
    finally:
        if ahead is not None:
            ahead.close()
        if backend is not None:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _compile_ahead(caps: Capabilities, ranks_on_node: int, workers: int | None,
                   clock: Clock) -> CompileAhead | None:
    """This rank's compile workers, started before its device is ready: as many as asked,
    else as its cores allow; none by default where kernels run on the CPU, whose timings
    compiling beside them would disturb, and none for a replay, which compiles nothing."""
    if workers is None:
        workers = default_workers(ranks_on_node) if caps.device is DeviceKind.GPU else 0
    if workers <= 0 or caps.device is DeviceKind.NONE:
        return None
    return CompileAhead(workers, clock, warm_up=backends.warm_up(caps.lang))


def _open(setup: Setup, where: list[tuple], clock: Clock, started_unix: float,
          command: str) -> tuple[Manager | None, str | None]:
    """Open (or resume) the cache and record the run; an error string if the cache refuses."""
    hosts, devices, details, pids, workers = zip(*where)
    problem, settings = setup.problem, setup.settings
    models = sorted(set(devices))
    if len(models) > 1 and not settings.allow_mixed_devices:
        by_model = "; ".join(f"{m}: ranks {', '.join(str(r) for r, d in enumerate(devices) if d == m)}"
                             for m in models)
        return None, (f"the ranks have different devices ({by_model}); their timings are not comparable. "
                      f"Start the job on one kind of device, or pass --allow-mixed-devices")
    identity = problem.identity()
    identity["devices"] = sorted(set(devices))
    try:
        cache = Cache(settings.cache_path, identity, problem.tune_params, problem.iterations, Objective.of(problem))
    except UserError as exc:
        return None, f"{problem.spec_path}: cache: {exc}"
    manager = Manager(setup, cache, hosts, devices, clock)
    cache.start_run(RunInfo(started_unix, len(hosts), settings.strategy, settings.seed, settings.max_fevals,
                            settings.time_limit_s, manager.batch_size, len(setup.space), command, __version__),
                    hosts, devices, pids, details)
    say(f"tuning {problem.kernel_name} ({problem.lang}) on {len(hosts)} rank(s): {len(setup.space)} "
        f"configurations, {manager.known} already in {settings.cache_path}, strategy {settings.strategy}, "
        f"batches of {manager.batch_size}, {_workers_text(workers)}")
    if cache.interrupted:
        say(f"the previous run was killed while {cache.interrupted}; they are not recorded and may be "
            f"measured again")
    return manager, None


def _loop(comm, manager: Manager | None, backend, space: SearchSpace, timeline: Timeline,
          ahead: CompileAhead | None) -> int:
    """Rounds until rank 0 says stop; returns the exit code it sent."""
    while True:
        orders = None
        if manager:
            with timeline.phase("strategy"):
                orders = manager.next_orders()
        with timeline.phase("wait"):
            order = comm.scatter(orders, root=0)
            timeline.clock.sync(order.now_s)
        if order.ids is None:
            break
        results = run_chunk(backend, space, order.ids, comm.rank, order.batch, timeline, order.derived, ahead,
                            order.upcoming, order.upcoming_derived)
        with timeline.phase("wait"):
            gathered = comm.gather((results, timeline.take(), timeline.clock.now(), backend.fatal_error), root=0)
            if manager:
                timeline.clock.sync(max(now for _, _, now, _ in gathered))
        if manager:
            results = [r for rank_results, _, _, _ in gathered for r in rank_results]
            phases = [(r, p) for r, (_, rows, _, _) in enumerate(gathered) for p in rows]
            lost = [(r, fatal) for r, (_, _, _, fatal) in enumerate(gathered) if fatal]
            if lost:
                rank, fatal = lost[0]
                log.error("rank %d (%s): %s", rank, manager.hosts[rank], fatal)
                manager.stop_requested = "device_error"
            with timeline.phase("write"):
                manager.record(results, phases)
            with timeline.phase("strategy"):
                manager.tell(results)
                say(manager.progress_line())
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    leftovers = comm.gather(timeline.take(), root=0)
    if manager:
        manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])
    return order.exit_code


@contextmanager
def _stop_requests(manager: Manager | None) -> Iterator[None]:
    """SIGTERM and SIGUSR1 (what Slurm sends before a job's end, with ``--signal``) ask rank 0
    to stop handing out batches; the batch in flight finishes and is recorded. Other ranks
    ignore them so that they can finish their chunk and hear the stop from rank 0."""
    def handler(signum, frame):
        if manager:
            manager.stop_requested = "signal"
            log.warning("received %s: finishing the batch in flight, then stopping",
                        signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _finish(manager: Manager, timeline: Timeline) -> None:
    clock = timeline.clock
    with timeline.phase("write"):
        manager.save_strategy()
        manager.cache.finish_run(clock.now(), manager.stop_reason, manager.measured)
    manager.cache.append_phases([(0, p) for p in timeline.take()])
    manager.cache.close()
    if manager.best is None:
        say(f"no configuration passed ({manager.measured} measured in this run); see the cache for statuses")
    else:
        best = manager.best
        say(f"best: {manager.objective.describe(best)} {_format_config(manager.space.config(best.config_id))}")
    kind = "simulated " if clock.simulated else ""
    say(f"{manager.measured} configurations measured in {clock.now():.1f} {kind}s ({manager.stop_reason}); "
        f"results in {manager.cache.path}")
    if manager.error:
        print(f"mpitune: error: {manager.error}", file=sys.stderr, flush=True)
    if manager.stop_reason in RESUMABLE:
        say(f"stopped early ({manager.stop_reason}); run the same command again to resume "
            f"(exit code {EXIT_RESUMABLE})")


def _refuse(rank: int, error: str) -> int:
    if rank == 0:
        print(f"mpitune: error: {error}", file=sys.stderr, flush=True)
    return EXIT_USER_ERROR
