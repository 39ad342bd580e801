"""The rounds of a run, on every rank, until rank 0 says stop.

A worker takes an order at a time, measures it and reports it (``rounds``). Rank 0 hands out what
the ranks want (handouts.py), records each report as it comes and tells the strategy as the policy
says (``Rank0Rounds``). Its own orders go to its lane (rank.py); without one, it measures an order
of its own whenever no report waits. A worker's order is due (faults/deadlines.py) from when the
worker could start it (``Rank0Rounds._due``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from mpitune.backends.base import Backend
from mpitune.model.timeline import PhaseRow, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.faults.deadlines import Deadlines, floor_s
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.faults.silent_round import keep_last_rows, keep_reports
from mpitune.scheduling.handouts import Handouts
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason, interrupted
from mpitune.scheduling.rank import Lane, Merge, carry_out, measures_beside
from mpitune.scheduling.run_record import progress_line, say
from mpitune.scheduling.transport import SilentRanks, Transport, pauses

_LAST_LOOK_S = 1.0  # rank 0 still looks once for the last rows this long, whatever the deadline left
_STOP_LOOK_S = 0.05  # how often rank 0, waiting for reports, asks whether a stop must go out


@dataclass(frozen=True)
class Rank0:
    """What rank 0 carries through the rounds: the search, its orders' deadlines, and the watch its
    main thread shares with its heartbeat thread (faults/liveness.py)."""

    manager: Manager
    deadlines: Deadlines
    watch: Watch


def rounds(
    transport: Transport,
    manager: Manager | None,
    backend: Backend,
    timeline: Timeline,
    ahead: CompilePool | None,
    watch: Watch,
    stop_beating: Callable[[], None],
    measuring: Timeline | None = None,
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did. Rank 0 (the rank with the ``manager``)
    measures its own orders on ``measuring`` (None: ``timeline``).

    Every exchange has a deadline (faults/deadlines.py), except a worker's wait for its first order:
    the heartbeats cover it, as they cover the start-up collectives. ``SilentRanks`` leaves here on
    every rank; on rank 0 once faults/silent_round.py recorded what did arrive. The heartbeats stop
    with the order to stop: from there on the ranks leave one by one."""
    if manager is not None:
        floor = floor_s(manager.settings.rank_deadline_floor_s)
        kernel = manager.setup.problem.kernel
        deadlines = Deadlines(floor, kernel.timeout_s, transport.size, kernel.iterations)
        rank0 = Rank0(manager, deadlines, watch)
        stopping = lambda: manager.stop_requested is not None
        own = Rank0Rounds(transport, rank0, backend, (timeline, measuring or timeline), ahead, stopping)
        order, sent_s = own.run()
        own.write_phase()  # before the last gather, which may wait for silent ranks
        stop_beating()
        _last_rows(transport, rank0, order, sent_s, own.last_rows())
        assert order.stop is not None
        return order.stop
    held = lambda: [o for o in transport.waiting() if isinstance(o, Order)]
    stopping = lambda: interrupted(transport.waiting())
    patience_s: float | None = None  # how long a worker waits for its next order
    while True:
        with timeline.phase("wait"):
            order = transport.scatter(None, patience_s)
            timeline.clock.sync(order.now_s)
        patience_s = order.next_order_within_s
        if order.stop is not None:
            stop_beating()
            break
        if order.hold:
            continue
        report = carry_out(order, backend, transport.rank, timeline, ahead, stopping, held)
        with timeline.phase("wait"):
            transport.gather(report, patience_s)
    transport.gather(timeline.take(), patience_s)  # the last rows (the final wait) to rank 0
    return order.stop


def _last_rows(transport: Transport, rank0: Rank0, order: Order, sent_s: float, rows: list[PhaseRow]) -> None:
    """The last rows of every rank (their final waits) reach rank 0 with one more gather."""
    deadline_s = order.deadline_s
    if deadline_s is not None:  # what is left of it; a report already there must still be looked for
        deadline_s = max(deadline_s - (time.monotonic() - sent_s), _LAST_LOOK_S)
    try:
        leftovers = transport.gather(rows, deadline_s)
    except SilentRanks as silent:
        keep_last_rows(silent, rank0, sent_s)
        raise
    assert leftovers is not None
    with rank0.watch.writing:
        rank0.manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])


class _Due(enum.Enum):
    """What rank 0's wait gives instead of a report: a stop must go out first, or (on a real clock)
    it found no report and has rows to write."""

    STOP = enum.auto()
    WRITE = enum.auto()
    HOLD = enum.auto()  # nothing to wait for but the job's other device models


@dataclass
class _Own:
    """One of rank 0's orders not yet reported: when it went out, and its lane's report to come
    (None: an order to stop, or measured in the main thread)."""

    order: Order
    sent_s: float
    report: Future[Report] | None = None


class Rank0Rounds:
    """Rank 0's side of the rounds; ``run`` returns its order to stop and when it went out."""

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
        self.handouts = Handouts(rank0.manager)
        self.own: deque[_Own] = deque()
        self.sent: list[deque[tuple[Order, float]]] = [deque() for _ in range(transport.size)]
        self.reported_s = [time.monotonic()] * transport.size  # when each rank could start its next order
        self.stash: dict[int, deque[Report]] = {r: deque() for r in range(1, transport.size)}
        self.progress: list[str] = []  # progress lines of hand-outs whose rows are not yet on disk

    def run(self) -> tuple[Order, float]:
        try:
            while True:
                self._hand_out()
                if self.own and self.own[0].order.stop is not None and not self.handouts.busy:
                    last = self.own.popleft()
                    return last.order, last.sent_s
                got = self._next_report()
                if isinstance(got, _Due):  # STOP: the order to stop goes out now; HOLD: look again
                    continue
                if got is None:  # no lane, and no report waiting: rank 0 measures an order of its own
                    mine = self.own.popleft()
                    report = carry_out(
                        mine.order, self.backend, 0, self.timeline, self.ahead, self.stopping, self._held
                    )
                    self._record(0, mine.order, report)
                    continue
                rank, report = got
                if rank == 0:
                    order = self.own.popleft().order
                    merged = self.merge.rows(self.timeline.take(), report.phases, report.now_s)
                    report = dataclasses.replace(report, phases=tuple(merged))
                else:
                    order = self.sent[rank].popleft()[0]
                    self.reported_s[rank] = time.monotonic()
                self._record(rank, order, report)
        except SilentRanks:  # what did arrive is recorded (faults/silent_round.py): on disk now
            self.write_pending(now=True)
            raise
        finally:
            if self.lane is not None:
                self.lane.close()

    def write_pending(self, now: bool = False) -> None:
        """Write what the file was given and has not written, now or once due (the manager's
        ``write_pending``); not once the heartbeat thread closed the file."""
        watch = self.rank0.watch
        with watch.writing:
            if not watch.closed:
                self.rank0.manager.write_pending(now)
                self._say_written()

    def write_phase(self) -> None:
        """Write what waits now, on a real clock as a ``write`` phase of its own. On a simulated
        clock a phase of its own would change the replay's timeline and charges."""
        if self.timeline.clock.simulated or not self.rank0.manager.cache.unwritten:
            self.write_pending(now=True)
            return
        with self.timeline.phase("write"):
            self.write_pending(now=True)

    def _say_written(self) -> None:
        """The progress lines whose rows are on disk: a person who reads one may count on them."""
        if self.progress and not self.rank0.manager.cache.unwritten:
            say(*self.progress)
            self.progress.clear()

    def _held(self) -> list[Order]:
        """Rank 0's own orders not yet started, to compile ahead."""
        return [own.order for own in self.own]

    def last_rows(self) -> list[PhaseRow]:
        """Rank 0's rows not yet written: its main thread's, merged with its finished lane's."""
        return self.merge.rows(self.timeline.take(), [], None) if self.lane else self.timeline.take()

    def _hand_out(self) -> None:
        rank0, timeline = self.rank0, self.timeline
        started_s = time.monotonic()
        with timeline.phase("strategy"), rank0.watch.writing:
            depth = self.handouts.policy.depth
            hand_outs = [
                dict(zip(h, rank0.deadlines.stamp(list(h.values()), depth))) for h in self.handouts.hand_outs()
            ]
        if hand_outs:
            rank0.deadlines.note_turnaround(time.monotonic() - started_s)
        with timeline.phase("wait"):
            for orders in hand_outs:
                for rank, order in orders.items():
                    if order.hold:  # no report comes back
                        self.transport.send(rank, order)
                    elif rank == 0:
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

    def _next_report(self) -> tuple[int, Report] | _Due | None:
        """The next report, rank 0's own (from its lane) as rank 0's. None when rank 0 is to measure
        an order of its own in its main thread."""
        due = self._due()
        in_main = bool(self.own) and self.own[0].order.stop is None and self.own[0].report is None
        if not due and self._lane_head() is None:
            if not in_main and self.handouts.holding:
                with self.timeline.phase("wait"):
                    for pause_s in pauses():
                        if not self.rank0.manager.others_searching():
                            break
                        time.sleep(pause_s)
                return _Due.HOLD
            assert in_main, "rank 0 has nothing to wait for"
            return None
        got: tuple[int, Report] | _Due | None
        while True:
            with self.timeline.phase("wait"):
                try:
                    if self.timeline.clock.simulated:
                        got = self._earliest(due, not in_main)
                    else:
                        got = self._first(due, not in_main)
                except SilentRanks as silent:
                    keep_reports(
                        silent, self.rank0, self.handouts, [self.sent[r][0] for r in silent.ranks if self.sent[r]]
                    )
                    raise
                if isinstance(got, tuple):
                    self.timeline.clock.sync(got[1].now_s)
            if got is not _Due.WRITE:
                return got
            self.write_phase()  # rank 0 waits: what it recorded goes to disk first

    def _first(self, due: dict[int, float], wait: bool) -> tuple[int, Report] | _Due | None:
        """On a real clock, the first report to arrive, the lane's or a worker's. ``_Due.STOP`` once
        a stop was asked for (a signal, the stop file) and its orders have not gone out. The ranks
        then hear it while they measure, so that a long order ends within one configuration or
        launch."""
        lane, watch = self._lane_head(), self.rank0.watch
        look_s = time.monotonic() + _STOP_LOOK_S
        for pause_s in pauses():  # between looks at the workers and the lane
            if lane is not None and lane.done():
                return 0, lane.result()
            got = self.transport.receive(due, False) if due else None
            if got is not None:
                return got[0], got[1]
            if lane is None and not wait:
                return None
            if time.monotonic() >= look_s:
                if self.rank0.manager.stop_unsent():
                    return _Due.STOP
                look_s = time.monotonic() + _STOP_LOOK_S
            if self.rank0.manager.cache.unwritten:
                return _Due.WRITE
            watch.polling = bool(due)  # waiting in a gather, as far as the heartbeat thread knows
            time.sleep(pause_s)
            watch.polling = False
        raise AssertionError("not reached")

    def _earliest(self, due: dict[int, float], wait: bool) -> tuple[int, Report] | None:
        """On a simulated clock (a replay), the earliest report by its clock. A report arrives as
        fast as its rank replays it, not when its clock says. So rank 0 takes each waited-for rank's
        next report, and its lane's, and hands on the earliest. Without waiting, only one its own
        clock has reached, as a real rank 0 would have found them."""
        stash = self.stash
        while missing := [r for r in due if not stash[r]]:
            self.write_pending()  # what is due goes to disk before rank 0 may wait
            got = self.transport.receive({r: due[r] for r in missing}, True)
            assert got is not None
            stash[got[0]].append(got[1])
        heads = [(stash[r][0].now_s, r) for r in due]
        lane = self._lane_head()
        if lane is not None:
            if not lane.done():
                self.write_pending()  # and before it waits for its lane
            heads.append((lane.result().now_s, 0))
        now_s, rank = min(heads)
        if not wait and now_s > self.timeline.clock.now():
            return None
        return (0, lane.result()) if rank == 0 and lane is not None else (rank, stash[rank].popleft())

    def _record(self, rank: int, order: Order, report: Report) -> None:
        """One report into the file and the strategy, as the policy says; the progress line once its
        hand-out is complete."""
        rank0, timeline = self.rank0, self.timeline
        rank0.deadlines.observe(rank, order, report)
        with rank0.watch.writing:
            with timeline.phase("write"):
                recorded = self.handouts.record(rank, report)
                # Due, or now where rank 0 measures in its main thread next (it has no lane) on a real clock.
                rank0.manager.write_pending(self.lane is None and not timeline.clock.simulated)
            with timeline.phase("strategy"):
                if recorded.told:
                    rank0.manager.tell(recorded.told)
                if recorded.completed:
                    self.progress.append(progress_line(rank0.manager))
                self._say_written()
