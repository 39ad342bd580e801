"""Rank 0's rounds of a refilled run (handouts.py): hand out what the ranks want, take each report
as it comes, write it and tell it, until rank 0's own order to stop is next and every rank has
reported. The workers' side is the rounds of rounds.py, unchanged: an order at a time, a report
for each.

Rank 0's own orders go to its lane (rank.py), which measures them beside the hand-outs; where it
cannot (a backend in rank 0's own process), rank 0 measures an order of its own in its main
thread whenever no report is waiting, and the workers go on with the next order each holds.
A worker's order is due (faults/deadlines.py) from when the worker could start it: it went out,
and the worker had reported the order before; a late one ends the run as a silent rank.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from mpitune.backends.base import Backend
from mpitune.model.timeline import PhaseRow, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.faults.deadlines import HISTORY_ROUNDS
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.rank import Lane, Merge, measures_beside, serve
from mpitune.scheduling.refill.handouts import DEPTH, Refill
from mpitune.scheduling.session import Rank0, progress_line, say
from mpitune.scheduling.transport import SilentRanks, Transport

_FIRST_PAUSE_S, _MAX_PAUSE_S = 20e-6, 1e-3  # between looks at the workers and the lane (as comm.py's)


@dataclass
class _Own:
    """One of rank 0's orders not yet reported: when it went out, and its lane's report to come
    (None: an order to stop, or measured in the main thread)."""

    order: Order
    sent_s: float
    report: Future[Report] | None = None


class RefillRounds:
    """Rank 0's side of a refilled run; ``run`` returns its order to stop and when it went out."""

    def __init__(
        self,
        transport: Transport,
        rank0: Rank0,
        backend: Backend,
        timelines: tuple[Timeline, Timeline],
        ahead: CompilePool | None,
        stopping: Callable[[], bool],
    ):
        self.transport, self.rank0, self.backend, self.ahead, self.stopping = transport, rank0, backend, ahead, stopping
        self.timeline, measuring = timelines
        beside = measuring is not self.timeline and measures_beside(backend, measuring.clock)
        self.lane = Lane(backend, measuring, ahead, stopping) if beside else None
        self.merge = Merge()
        self.refill = Refill(rank0.manager)
        rank0.deadlines.window = HISTORY_ROUNDS * transport.size  # a report is a rank's round
        self.own: deque[_Own] = deque()
        self.sent: list[deque[tuple[Order, float]]] = [deque() for _ in range(transport.size)]
        self.reported_s = [time.monotonic()] * transport.size  # when each rank could start its next order
        self.stash: dict[int, deque[Report]] = {r: deque() for r in range(1, transport.size)}

    def run(self) -> tuple[Order, float]:
        try:
            while True:
                self._hand_out()
                if self.own and self.own[0].order.stop is not None and not self.refill.busy:
                    last = self.own.popleft()
                    return last.order, last.sent_s
                got = self._next_report()
                if got is None:  # no lane, and no report waiting: rank 0 measures an order of its own
                    mine = self.own.popleft()
                    self._record(
                        0, mine.order, serve(mine.order, self.backend, 0, self.timeline, self.ahead, self.stopping)
                    )
                    continue
                rank, report = got
                if rank == 0:
                    order = self.own.popleft().order
                    report = dataclasses.replace(report, phases=tuple(self._merged(report)))
                else:
                    order = self.sent[rank].popleft()[0]
                    self.reported_s[rank] = time.monotonic()
                self._record(rank, order, report)
        finally:
            if self.lane is not None:
                self.lane.close()

    def last_rows(self) -> list[PhaseRow]:
        """Rank 0's rows not yet written: its main thread's, merged with its lane's, which is done."""
        return self.merge.rows(self.timeline.take(), [], None) if self.lane else self.timeline.take()

    def _merged(self, report: Report) -> list[PhaseRow]:
        """The lane's rows of ``report`` with rank 0's main rows until then (rank.Merge)."""
        return self.merge.rows(self.timeline.take(), report.phases, report.now_s)

    def _hand_out(self) -> None:
        rank0, timeline = self.rank0, self.timeline
        with timeline.phase("strategy"), rank0.watch.writing:
            stamp = rank0.deadlines.stamp_refilled
            hand_outs = [dict(zip(h, stamp(list(h.values()), DEPTH))) for h in self.refill.hand_outs()]
        with timeline.phase("wait"):
            for orders in hand_outs:
                for rank, order in orders.items():
                    if rank == 0:
                        lane = self.lane if order.stop is None else None
                        self.own.append(_Own(order, time.monotonic(), lane.submit(order) if lane else None))
                    else:
                        self.transport.send(rank, order)
                        self.sent[rank].append((order, time.monotonic()))

    def _due(self) -> dict[int, float]:
        """Each worker rank 0 waits for, and when its report is due."""
        return {
            r: max(sent[0][1], self.reported_s[r]) + (sent[0][0].deadline_s or math.inf)
            for r, sent in enumerate(self.sent)
            if sent and sent[0][0].stop is None
        }

    def _lane_head(self) -> Future[Report] | None:
        return self.own[0].report if self.own else None

    def _next_report(self) -> tuple[int, Report] | None:
        """The next report, rank 0's own (from its lane) as rank 0's; None when rank 0 is to
        measure an order of its own in its main thread."""
        due = self._due()
        in_main = bool(self.own) and self.own[0].order.stop is None and self.own[0].report is None
        if not due and self._lane_head() is None:
            assert in_main, "rank 0 has nothing to wait for"
            return None
        with self.timeline.phase("wait"):
            try:
                if self.timeline.clock.simulated:
                    got = self._earliest(due, not in_main)
                else:
                    got = self._first(due, not in_main)
            except SilentRanks as silent:
                self._silent(silent)
                raise
            if got is not None:
                self.timeline.clock.sync(got[1].now_s)
        return got

    def _first(self, due: dict[int, float], wait: bool) -> tuple[int, Report] | None:
        """On a real clock, the first report to arrive: the lane's or a worker's."""
        lane = self._lane_head()
        if lane is None:
            got = self.transport.receive(due, wait)
            return None if got is None else (got[0], got[1])
        pause_s = _FIRST_PAUSE_S
        while True:
            if lane.done():
                return 0, lane.result()
            got = self.transport.receive(due, False) if due else None
            if got is not None:
                return got[0], got[1]
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, _MAX_PAUSE_S)

    def _earliest(self, due: dict[int, float], wait: bool) -> tuple[int, Report] | None:
        """On a simulated clock (a replay) a report arrives as fast as its rank replays it, not
        when its clock says: rank 0 takes each waited-for rank's next report, and its lane's, and
        hands on the earliest by its clock; without waiting, only one its own clock has reached,
        as a real rank 0 would have found them."""
        stash = self.stash
        while missing := [r for r in due if not stash[r]]:
            got = self.transport.receive({r: due[r] for r in missing}, True)
            assert got is not None
            stash[got[0]].append(got[1])
        heads = [(stash[r][0].now_s, r) for r in due]
        lane = self._lane_head()
        if lane is not None:
            heads.append((lane.result().now_s, 0))
        now_s, rank = min(heads)
        if not wait and now_s > self.timeline.clock.now():
            return None
        return (0, lane.result()) if rank == 0 and lane is not None else (rank, stash[rank].popleft())

    def _silent(self, silent: SilentRanks) -> None:
        """Workers fell silent: every report that came is written already, and what they held
        stays in flight in the file (each report cleared its own chunk only)."""
        self.rank0.watch.ending = True
        late = [self.sent[r][0] for r in silent.ranks if self.sent[r]]
        if silent.heartbeat is None and late:
            order, sent_s = late[0]
            silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
        manager = self.rank0.manager
        manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK

    def _record(self, rank: int, order: Order, report: Report) -> None:
        """One report into the file and the strategy; the progress line once its hand-out is complete."""
        rank0, timeline = self.rank0, self.timeline
        rank0.deadlines.observe_one(rank, order, report)
        with rank0.watch.writing:
            with timeline.phase("write"):
                recorded = self.refill.record(rank, report)
            with timeline.phase("strategy"):
                if recorded.told:
                    rank0.manager.tell(recorded.told)
                if recorded.completed:
                    say(progress_line(rank0.manager))
