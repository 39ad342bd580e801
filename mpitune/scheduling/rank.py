"""What every rank does with an order: its chunk measured (``carry_out``, ``Chunk``), or the
candidates timed again, into a report. No MPI here: rounds.py moves the messages.

On several ranks rank 0 measures its own orders in a thread (``Lane``) while the main thread hands
out and records; measuring in the main thread, it refilled no one meanwhile. The lane mostly waits
on its worker process (process/isolation.py); a backend in the rank's own process measures in the
main thread (``measures_beside``). ``Merge`` makes one row set of rank 0's two timelines, so that
its phases still add up to its wall time.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from mpitune.backends.base import Backend, Compiled
from mpitune.model.judging.racing import Race
from mpitune.model.result import Result, remade
from mpitune.model.timeline import BACKGROUND_PHASES, BESIDE, Clock, PhaseRow, Timeline
from mpitune.model.work import Launch, Retime, Work
from mpitune.process.compile_ahead import CompilePool
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling.messages import Order, Report


def carry_out(
    order: Order,
    backend: Backend,
    rank: int,
    timeline: Timeline,
    ahead: CompilePool | None = None,
    stopping: Callable[[], bool] | None = None,
    held: Callable[[], Sequence[Order]] | None = None,
) -> Report:
    """Carry out one order (not a stop) into a report: each configuration of its chunk measured in
    turn, the phases since the last report, and this rank's clock. Failures are statuses.

    With compile workers (``ahead``) the chunk, then the orders the rank ``held``, are queued for
    compiling first: the device measures one configuration while the next ones compile. A lost
    device (``backend.fatal_error``) stops the chunk; nothing after it is trusted. After one
    configuration, ``stopping()`` ends it too, the rest unmeasured: a chunk of one (a searching
    strategy's) stays whole, its search continuable. With a ``race`` (None: racing is off), each
    configuration races against the best known; under the first-launch rule with compile workers, in
    two passes (``Chunk.two_passes``)."""
    timeline.batch = order.batch
    if backend.fatal_error:  # lost with the chunk before: nothing measured here could be trusted
        return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error)
    if order.retime is not None:  # confirmation: all compiled first, so that no compile loads the host
        # between the interleaved launches; the search's queued compiles are dropped
        if ahead is not None:
            ahead.keep_only(order.retime.ids)
        compiled = _compiled_ahead(order.retime, backend, timeline, ahead, stopping)
        stopped = stopping is not None and stopping()
        launches = [] if stopped else backend.retime(order.retime, timeline, compiled, stopping)
        return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, tuple(launches))
    calibration: tuple[Launch, ...] = ()
    if order.calibrate is not None:  # before the chunk: what the workers queue of it waits behind
        compiled = _compiled_ahead(order.calibrate, backend, timeline, ahead)
        calibration = tuple(backend.retime(order.calibrate, timeline, compiled))
    if ahead is not None:
        later = tuple(held()) if held is not None else ()
        ahead.keep_only(order.ids + tuple(i for o in later for i in o.ids))
        _queue(ahead, (order, *later))
    chunk = Chunk(order, backend, rank, timeline, ahead, stopping, held)
    if order.race is not None and order.race.looks_ahead and ahead is not None and len(order.work) > 1:
        results = chunk.two_passes(order.race)
    else:
        results = chunk.in_order(order.work, order.race)
    return Report(tuple(results), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, (), calibration)


def _compiled_ahead(
    retime: Retime,
    backend: Backend,
    timeline: Timeline,
    ahead: CompilePool | None,
    stopping: Callable[[], bool] | None = None,
) -> dict[int, Compiled]:
    """The order's configurations from the compile workers (none without them), their compiles on
    the timeline; fewer once ``stopping()`` says so."""
    compiled: dict[int, Compiled] = {}
    if ahead is not None:
        ahead.submit(retime.work)
        for work in retime.work:
            if stopping is not None and stopping():
                break
            compiled[work.config_id] = _take(ahead, work, backend, timeline)
    return compiled


def _queue(ahead: CompilePool, orders: Sequence[Order]) -> None:
    """Each order's configurations to the compile workers, with when rank 0 dealt it."""
    for order in orders:
        ahead.submit(order.work, since_s=order.now_s)


def _take(ahead: CompilePool, work: Work, backend: Backend, timeline: Timeline) -> Compiled:
    """``work`` from the compile workers, the device waiting for it; its compile on the timeline."""
    with timeline.phase("compile", work.config_id):
        compiled = ahead.take(work, backend.deadline_s())
    row = ahead.row(compiled, timeline.batch)
    if row is not None:
        timeline.extend([row])
    return compiled


class Chunk:
    """One order's configurations measured on this rank: the steps ``carry_out`` composes."""

    def __init__(
        self,
        order: Order,
        backend: Backend,
        rank: int,
        timeline: Timeline,
        ahead: CompilePool | None,
        stopping: Callable[[], bool] | None,
        held: Callable[[], Sequence[Order]] | None = None,
    ):
        self.order, self.backend, self.rank, self.timeline = order, backend, rank, timeline
        self.ahead, self.stopping, self.held = ahead, stopping, held

    def in_order(self, work: Sequence[Work], race: Race | None) -> list[Result]:
        """Each configuration in turn, racing against the best known and those measured since. Stops
        early as ``carry_out`` says."""
        results: list[Result] = []
        for item in work:
            if results and self.stopping is not None and self.stopping():
                break
            results.append(self.measure(item, race))
            if race is not None:
                race = race.after(results[-1:])
            if self.backend.fatal_error:
                break
        return results

    def two_passes(self, race: Race) -> list[Result]:
        """First every configuration's first launch; then timed launches for those whose first
        launch, fastest first, is within the bound of the best known by then.

        In the chunk's order, each configuration a little faster than the best lowers the bound only
        a little, and all get every launch. Fastest first, the rest mostly lose on the launch they
        made. A survivor is compiled again and measured whole, as one pass would. A chunk that must
        end early drops what is deferred: it comes back unmeasured, not stopped by no one's best."""
        first = self.in_order(self.order.work, race.first_pass())
        deferred = sorted(
            (r for r in first if r.ok and r.raced and math.isfinite(r.first_ms)), key=lambda r: r.first_ms
        )
        deferred_ids = {r.config_id for r in deferred}
        final = {r.config_id: r for r in first if r.config_id not in deferred_ids}
        race = race.after(final.values())
        work = {w.config_id: w for w in self.order.work}
        survivors = [work[r.config_id] for r in deferred if not race.lost_first(r.first_ms)]
        assert self.ahead is not None, "two passes need compile workers"
        self.ahead.submit(survivors)
        for r in deferred:
            if self.backend.fatal_error or (final and self.stopping is not None and self.stopping()):
                break
            if race.lost_first(r.first_ms):
                final[r.config_id] = r
                continue
            final[r.config_id] = self.measure(work[r.config_id], race)
            race = race.after([final[r.config_id]])
        return [final[w.config_id] for w in self.order.work if w.config_id in final]

    def measure(self, work: Work, race: Race | None) -> Result:
        """One configuration, compiled ahead where there are compile workers: a result of this rank
        and batch, placed on the rank's clock."""
        timeline = self.timeline
        started_s = timeline.clock.now()
        compiled = None
        if self.ahead is not None:
            compiled = _take(self.ahead, work, self.backend, timeline)
            if self.held is not None:  # an order that came while this compiled: it compiles while this runs
                _queue(self.ahead, self.held())
        result = self.backend.run(work, timeline, compiled, race)
        return remade(
            result, rank=self.rank, batch=self.order.batch, started_s=started_s, finished_s=timeline.clock.now()
        )


def measuring_timeline(timeline: Timeline) -> Timeline:
    """Rank 0's measuring timeline beside its main one: the same clock on a real run; on a simulated
    one, a clock of its own from the same moment."""
    clock = timeline.clock
    if not clock.simulated:
        return Timeline(clock)
    own = Clock(simulated=True)
    own.sync(clock.now())
    return Timeline(own)


def measures_beside(backend: Backend, clock: Clock) -> bool:
    """Whether rank 0 can measure beside its hand-outs: its measuring is in a worker process, or
    numbers on a simulated clock."""
    return isinstance(backend, IsolatedBackend) or clock.simulated


class Lane:
    """Rank 0's own orders, measured in turn by a thread on its backend and measuring timeline."""

    def __init__(self, backend: Backend, timeline: Timeline, ahead: CompilePool | None, stopping: Callable[[], bool]):
        self.backend, self.timeline, self.ahead, self.stopping = backend, timeline, ahead, stopping
        self._closing = False  # the rounds are over: a chunk still measured ends at once
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mpitune-rank0-measure")
        self._pending: deque[Order] = deque()  # submitted, not begun: compiled ahead of their turn

    def submit(self, order: Order) -> Future[Report]:
        """Rank 0's report of ``order``, to come once the orders before it are done."""
        self._pending.append(order)
        return self._pool.submit(self._serve, order)

    def _serve(self, order: Order) -> Report:
        self._pending.popleft()
        timeline = self.timeline
        timeline.clock.sync(order.now_s)  # as a worker starts an order: not before it went out
        timeline.idle_until(timeline.clock.now())  # the time between orders is no work of this lane's
        # On a simulated clock (a replay, a plan) when a stop reaches this thread is the host's
        # timing, not the replayed run's: the order is measured whole, so the same replay records
        # the same configurations however busy the host is.
        live = not timeline.clock.simulated
        stopping = lambda: self._closing or (live and self.stopping())
        return carry_out(order, self.backend, 0, timeline, self.ahead, stopping, self._held)

    def _held(self) -> list[Order]:
        return list(self._pending)

    def close(self) -> None:
        """No more orders: those not started are dropped. One still measured (the rounds left early)
        ends after its current configuration, unwaited for: the job is ending."""
        self._closing = True
        self._pool.shutdown(wait=False, cancel_futures=True)


class Merge:
    """Rank 0's rows as one timeline: the lane's rows as they are, and the main thread's where the
    lane did not work. Where it did, the main thread's waiting was no wait and is dropped. Its
    strategy and writes stay as background phases (``timeline.BESIDE``), as compiling ahead does.
    Every second of rank 0's wall time is then in exactly one phase."""

    def __init__(self) -> None:
        self._main: list[PhaseRow] = []  # main rows after the last cut, not yet merged

    def rows(self, main: list[PhaseRow], lane: Sequence[PhaseRow], cut_s: float | None) -> list[PhaseRow]:
        """The merged rows up to ``cut_s``, the end of the lane's rows given. Later main rows may
        still overlap the lane's next order. None: the lane is done, merge everything."""
        self._main.extend(main)
        busy = sorted((r.start_s, r.end_s) for r in lane if r.phase not in BACKGROUND_PHASES)
        out = list(lane)
        kept: list[PhaseRow] = []
        for row in self._main:
            if cut_s is not None and row.end_s > cut_s:
                if row.start_s < cut_s:
                    out.extend(_outside(dataclasses.replace(row, end_s=cut_s), busy))
                    row = dataclasses.replace(row, start_s=cut_s)
                kept.append(row)
                continue
            out.extend(_outside(row, busy))
        self._main = kept
        return out


def _outside(row: PhaseRow, busy: list[tuple[float, float]]) -> list[PhaseRow]:
    """``row`` cut to the times outside the sorted ``busy`` intervals. What they cover of a strategy
    or write row becomes its background phase; of any other phase, nothing."""
    if row.phase in BACKGROUND_PHASES:
        return [row]
    pieces, start_s = [], row.start_s
    beside = BESIDE.get(row.phase)
    for busy_start_s, busy_end_s in busy:
        if busy_end_s <= start_s or busy_start_s >= row.end_s:
            continue
        if busy_start_s > start_s:
            pieces.append(dataclasses.replace(row, start_s=start_s, end_s=busy_start_s))
        covered_start_s, covered_end_s = max(busy_start_s, start_s), min(busy_end_s, row.end_s)
        if beside is not None and covered_end_s > covered_start_s:
            pieces.append(dataclasses.replace(row, phase=beside, start_s=covered_start_s, end_s=covered_end_s))
        start_s = max(start_s, covered_end_s)
    if row.end_s > start_s:
        pieces.append(dataclasses.replace(row, start_s=start_s))
    return pieces
