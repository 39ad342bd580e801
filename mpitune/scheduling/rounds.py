"""The rounds of a run, on every rank: rank 0 fills and sends batches, each rank measures its
chunk and reports, rank 0 records the reports, tells the strategy and prints the progress line,
until an order to stop. A round some ranks do not answer leaves through faults/silent_round.py.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from mpitune.backends.base import Backend
from mpitune.model.timeline import Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.faults.deadlines import Deadlines, floor_s
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.faults.silent_round import keep_last_rows, keep_round
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason, interrupted
from mpitune.scheduling.rank import serve
from mpitune.scheduling.refill import Refill, refilled
from mpitune.scheduling.session import Rank0, progress_line, say
from mpitune.scheduling.transport import SilentRanks, Transport

# Rank 0 still looks once for reports this long when its own chunk used up a batch's deadline.
_LAST_LOOK_S = 1.0


def rounds(
    transport: Transport,
    manager: Manager | None,
    backend: Backend,
    timeline: Timeline,
    ahead: CompilePool | None,
    watch: Watch,
    stop_beating: Callable[[], None],
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did.

    Rank 0 keeps ``manager.depth`` batches in flight (two on several ranks): it sends batch b
    once it has recorded batch b - 2, so a worker finds its next order waiting when it reports
    a chunk (the transport keeps each rank's messages in order), and rank 0 measures its own
    chunks in turn, recording each batch after its own chunk of it.

    Every exchange has a deadline (faults/deadlines.py) except a worker's wait for its first
    order, which the heartbeats cover, as they cover the start-up collectives. ``SilentRanks``
    leaves here on every rank: on rank 0 once faults/silent_round.py has recorded what did
    arrive, so that the file keeps every completed configuration and names the lost ones.
    The heartbeats stop with the order to stop: from there on the ranks leave one by one."""
    rank0 = None
    if manager:
        deadlines = Deadlines(floor_s(manager.settings.rank_deadline_floor_s), manager.setup.problem.timeout_s)
        rank0 = Rank0(manager, deadlines, watch)
    stopping = _stopping(transport, manager)
    patience_s: float | None = None  # how long a worker waits for its next order
    if rank0 and transport.size > 1 and refilled(rank0.manager):
        order, sent_s = _refill(transport, rank0, backend, timeline, ahead, stopping)
        stop_beating()
        _last_rows(transport, rank0, timeline, order, sent_s, patience_s)
        assert order.stop is not None
        return order.stop
    while True:
        if rank0:
            order, sent_s = _send(transport, rank0, timeline)
        else:
            with timeline.phase("wait"):
                order, sent_s = transport.scatter(None, patience_s), time.monotonic()
                timeline.clock.sync(order.now_s)
        patience_s = order.next_order_within_s
        if order.stop is not None:
            stop_beating()
            break
        report = serve(order, backend, transport.rank, timeline, ahead, stopping)
        if rank0:
            _gather(transport, rank0, timeline, order, sent_s, report)
        else:
            with timeline.phase("wait"):
                transport.gather(report, patience_s)
    _last_rows(transport, rank0, timeline, order, sent_s, patience_s)
    return order.stop


def _refill(
    transport: Transport,
    rank0: Rank0,
    backend: Backend,
    timeline: Timeline,
    ahead: CompilePool | None,
    stopping: Callable[[], bool],
) -> tuple[Order, float]:
    """Rank 0's rounds of a refilled run (refill.py): hand out what the ranks want, record each
    report as it comes, and measure its own orders when no report is waiting; until its order
    to stop is next and every rank has reported. Returns that order and when it went out.

    A worker's order is due (``Deadlines``) from when the worker could start it: it went out,
    and the worker had reported the order before. Rank 0 measures its own orders in its main
    thread: meanwhile the workers go on with the next order each holds."""
    refill = Refill(rank0.manager)
    own: deque[tuple[Order, float]] = deque()
    sent: list[deque[tuple[Order, float]]] = [deque() for _ in range(transport.size)]
    reported_s = [time.monotonic()] * transport.size  # when each rank could start its next order
    stash: dict[int, deque[Report]] = {r: deque() for r in range(1, transport.size)}
    while True:
        with timeline.phase("strategy"), rank0.watch.writing:
            hand_outs = [dict(zip(h, rank0.deadlines.stamp(list(h.values())))) for h in refill.hand_outs()]
        with timeline.phase("wait"):
            for orders in hand_outs:
                for rank, order in orders.items():
                    if rank == 0:
                        own.append((order, time.monotonic()))
                    else:
                        transport.send(rank, order)
                        sent[rank].append((order, time.monotonic()))
        if own and own[0][0].stop is not None and not refill.busy:
            return own.popleft()
        due = {
            r: max(sent[r][0][1], reported_s[r]) + (sent[r][0][0].deadline_s or math.inf)
            for r in range(1, transport.size)
            if sent[r] and sent[r][0][0].stop is None
        }
        measuring = bool(own) and own[0][0].stop is None
        got = None
        if due:
            with timeline.phase("wait"):
                try:
                    got = _next_report(transport, due, not measuring, stash, timeline)
                except SilentRanks as silent:
                    _silent(silent, rank0, sent)
                    raise
                if got is not None:
                    timeline.clock.sync(got[1].now_s)
        if got is None:
            assert measuring, "rank 0 has nothing to wait for"
            order, _ = own.popleft()
            report = serve(order, backend, 0, timeline, ahead, stopping)
            _record_one(rank0, refill, timeline, 0, order, report)
            continue
        rank, report = got
        order, _ = sent[rank].popleft()
        reported_s[rank] = time.monotonic()
        _record_one(rank0, refill, timeline, rank, order, report)


def _next_report(
    transport: Transport, due: dict[int, float], wait: bool, stash: dict[int, deque[Report]], timeline: Timeline
) -> tuple[int, Report] | None:
    """The next report from the ranks in ``due``, or None when none is there and rank 0 does
    not ``wait``. On a real clock, the first to arrive. On a simulated clock (a replay) a report
    arrives as fast as the worker replays it, not when its clock says: rank 0 then takes each
    waited-for rank's next report and hands on the earliest by its clock, and without waiting
    only one its own clock has reached, as a real rank 0 would have found them."""
    if not timeline.clock.simulated:
        got = transport.receive(due, wait)
        return None if got is None else (got[0], got[1])
    while missing := [r for r in due if not stash[r]]:
        got = transport.receive({r: due[r] for r in missing}, True)
        assert got is not None
        stash[got[0]].append(got[1])
    rank = min(due, key=lambda r: (stash[r][0].now_s, r))
    if not wait and stash[rank][0].now_s > timeline.clock.now():
        return None
    return rank, stash[rank].popleft()


def _silent(silent: SilentRanks, rank0: Rank0, sent: list[deque[tuple[Order, float]]]) -> None:
    """Workers of a refilled run fell silent: every report that came is recorded already, and
    what they held stays in flight in the file (each report cleared its own chunk only)."""
    rank0.watch.ending = True
    late = [sent[r][0] for r in silent.ranks if sent[r]]
    if silent.heartbeat is None and late:
        order, sent_s = late[0]
        silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
    manager = rank0.manager
    manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK


def _record_one(rank0: Rank0, refill: Refill, timeline: Timeline, rank: int, order: Order, report: Report) -> None:
    """One report into the file and the strategy; the progress line once its hand-out is complete."""
    rank0.deadlines.observe_one(rank, order, report)
    with rank0.watch.writing:
        with timeline.phase("write"):
            recorded = refill.record(rank, report)
        with timeline.phase("strategy"):
            if recorded.told:
                rank0.manager.tell(recorded.told)
            if recorded.completed:
                say(progress_line(rank0.manager))


def _send(transport: Transport, rank0: Rank0, timeline: Timeline) -> tuple[Order, float]:
    """Rank 0 fills the batches in flight and sends the new ones; its own order of the oldest,
    and when that batch's ranks could start it."""
    with timeline.phase("strategy"), rank0.watch.writing:
        batches = [rank0.deadlines.stamp(orders) for orders in rank0.manager.fill()]
    with timeline.phase("wait"):
        for orders in batches:
            rank0.own.append((transport.scatter(orders), time.monotonic()))
        if batches and not math.isnan(rank0.reported_s):
            rank0.deadlines.turned(time.monotonic() - rank0.reported_s)
        order, sent_s = rank0.own.popleft()
        # This batch's deadline counts from when its ranks could start it: it went out, and the
        # batch before it was recorded (each rank had finished its chunk of that).
        if not math.isnan(rank0.reported_s):
            sent_s = max(sent_s, rank0.reported_s)
        timeline.clock.sync(order.now_s)
    return order, sent_s


def _gather(transport: Transport, rank0: Rank0, timeline: Timeline, order: Order, sent_s: float, own: Report) -> None:
    """Rank 0 gathers the oldest batch's reports within its deadline and records them."""
    with timeline.phase("wait"):
        try:
            reports = transport.gather(own, _remaining_s(order.deadline_s, sent_s))
        except SilentRanks as silent:
            keep_round(silent, rank0, transport, timeline, order, sent_s, own)
            raise
        rank0.reported_s = time.monotonic()
        assert reports is not None
        timeline.clock.sync(max(r.now_s for r in reports))
    rank0.deadlines.observe(next(iter(rank0.manager.in_flight.values())).orders, reports)
    with rank0.watch.writing:
        rank0.record(timeline, reports)


def _last_rows(
    transport: Transport, rank0: Rank0 | None, timeline: Timeline, order: Order, sent_s: float, patience_s: float | None
) -> None:
    """The last rows of every rank (their final waits) reach rank 0 with one more gather."""
    try:
        leftovers = transport.gather(timeline.take(), _remaining_s(order.deadline_s, sent_s) if rank0 else patience_s)
    except SilentRanks as silent:
        if rank0:
            keep_last_rows(silent, rank0, sent_s)
        raise
    if rank0:
        assert leftovers is not None
        with rank0.watch.writing:
            rank0.manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])


def _stopping(transport: Transport, manager: Manager | None) -> Callable[[], bool]:
    """Whether the run is being stopped from outside the search (``StopReason.interrupts``),
    asked before each configuration: on rank 0 once the stop is requested, on a worker once
    the order to stop waits behind its chunk. The chunk then ends before its next
    configuration (after its first), so that such a stop comes within a configuration or two
    of the batch rank 0 records when it decides to stop, rather than after the batch already
    on its way too; what was not measured a rerun measures."""
    if manager is not None:
        return lambda: manager.stop_requested is not None
    return lambda: interrupted(transport.waiting())


def _remaining_s(deadline_s: float | None, sent_s: float) -> float | None:
    """What is left of a deadline counted from ``sent_s``; rank 0 measured a chunk of its own
    meanwhile, and a report that is already there must still be looked for."""
    if deadline_s is None:
        return None
    return max(deadline_s - (time.monotonic() - sent_s), _LAST_LOOK_S)
