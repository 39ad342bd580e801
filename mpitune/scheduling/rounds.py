"""The rounds of a run, on every rank: rank 0 fills and sends batches, each rank measures its
chunk and reports, rank 0 records the reports, tells the strategy and prints the progress line,
until an order to stop. A round some ranks do not answer leaves through faults/silent_round.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mpitune.backends.base import Backend
from mpitune.model.timeline import PhaseRow, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.faults.deadlines import Deadlines, floor_s
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.faults.silent_round import keep_last_rows, keep_round
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason, interrupted
from mpitune.scheduling.rank import serve
from mpitune.scheduling.refill.handouts import refilled
from mpitune.scheduling.refill.rank0 import RefillRounds
from mpitune.scheduling.session import Rank0
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
    measuring: Timeline | None = None,
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did. A refilled run's rank 0 runs its own
    (refill/rank0.py), measuring on ``measuring`` (None: ``timeline``) beside them.

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
    held = None if manager else (lambda: [w for o in transport.waiting() if isinstance(o, Order) for w in o.work])
    patience_s: float | None = None  # how long a worker waits for its next order
    if rank0 and refilled(rank0.manager):
        refilling = RefillRounds(transport, rank0, backend, (timeline, measuring or timeline), ahead, stopping)
        order, sent_s = refilling.run()
        stop_beating()
        _last_rows(transport, rank0, timeline, order, sent_s, patience_s, refilling.last_rows())
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
        report = serve(order, backend, transport.rank, timeline, ahead, stopping, held)
        if rank0:
            _gather(transport, rank0, timeline, order, sent_s, report)
        else:
            with timeline.phase("wait"):
                transport.gather(report, patience_s)
    _last_rows(transport, rank0, timeline, order, sent_s, patience_s)
    return order.stop


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
    transport: Transport,
    rank0: Rank0 | None,
    timeline: Timeline,
    order: Order,
    sent_s: float,
    patience_s: float | None,
    rows: list[PhaseRow] | None = None,
) -> None:
    """The last rows of every rank (their final waits; ``rows``, else the timeline's) reach rank
    0 with one more gather."""
    rows = timeline.take() if rows is None else rows
    try:
        leftovers = transport.gather(rows, _remaining_s(order.deadline_s, sent_s) if rank0 else patience_s)
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
