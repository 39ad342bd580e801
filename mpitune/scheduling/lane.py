"""Rank 0's lane: on several ranks rank 0 measures its own orders in a thread of their own
(``Lane``), which drives its measuring worker while the main thread hands out and records.
While rank 0 measured an order in its main thread, it refilled no one, and a worker that ran
out of orders waited for it. The lane's thread mostly waits on a pipe to its measuring worker,
a process of its own (process/isolation.py); a backend that measures in the rank's own process
keeps its device in the main thread, which then measures as before (``measures_beside``). The
lane has a timeline of its own (``measuring_timeline``), and ``Merge`` makes one row set of rank
0's two timelines, so that its phases still add up to its wall time. No MPI here.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from mpitune.backends.base import Backend
from mpitune.model.timeline import BACKGROUND_PHASES, BESIDE, Clock, PhaseRow, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling.messages import Order, Report
from mpitune.scheduling.rank import carry_out


def measuring_timeline(timeline: Timeline) -> Timeline:
    """Rank 0's measuring timeline beside its main one (``timeline``): the same clock on a real
    run; on a simulated one, a clock of its own from the same moment."""
    clock = timeline.clock
    if not clock.simulated:
        return Timeline(clock)
    own = Clock(simulated=True)
    own.sync(clock.now())
    return Timeline(own)


def measures_beside(backend: Backend, clock: Clock) -> bool:
    """Whether rank 0 can measure beside its hand-outs: where its measuring is elsewhere, in a
    worker process or as numbers on a simulated clock."""
    return isinstance(backend, IsolatedBackend) or clock.simulated


class Lane:
    """Rank 0's own orders, measured in turn on its backend and ``timeline`` (its measuring one)
    by a thread of their own."""

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
        """No more orders: those not started are dropped, and one still measured (the rounds
        left early: a silent rank, an error) ends after its current configuration, unwaited for:
        the job is ending."""
        self._closing = True
        self._pool.shutdown(wait=False, cancel_futures=True)


class Merge:
    """Rank 0's rows as one timeline: its lane's rows as they are, and its main thread's rows
    where the lane did not work. Where it did, the main thread's waiting was no wait and is
    dropped; its strategy and writes go on as background phases (``timeline.BESIDE``), which
    stand beside the rank's own as compiling ahead does. Every second of rank 0's wall time is
    then in exactly one phase."""

    def __init__(self) -> None:
        self._main: list[PhaseRow] = []  # main rows after the last cut, not yet merged

    def rows(self, main: list[PhaseRow], lane: Sequence[PhaseRow], cut_s: float | None) -> list[PhaseRow]:
        """The merged rows up to ``cut_s`` (the end of the lane's rows given: later main rows may
        still overlap rows of its next order; None: the lane is done, merge everything)."""
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
    """``row`` cut to the times outside the ``busy`` intervals (sorted); what they cover of a
    strategy or write row as its background phase, of any other phase nothing."""
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
