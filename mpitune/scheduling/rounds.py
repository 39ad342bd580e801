"""The rounds of a run, on every rank: rank 0 fills and sends batches, each rank measures its
chunk and reports, rank 0 records the reports, tells the strategy and prints the progress line,
until an order to stop; and rank 0's record of a run that some ranks stopped answering in.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from mpitune.backends.base import Backend
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Timeline
from mpitune.process.compile_ahead import CompileAhead
from mpitune.scheduling.deadlines import Deadlines, floor_s
from mpitune.scheduling.liveness import Watch
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.rank import serve
from mpitune.scheduling.session import say
from mpitune.scheduling.transport import SilentRanks, Transport

# Rank 0 still looks once for reports this long when its own chunk used up a batch's deadline.
_LAST_LOOK_S = 1.0


def rounds(
    transport: Transport,
    manager: Manager | None,
    backend: Backend,
    space: SearchSpace,
    timeline: Timeline,
    ahead: CompileAhead | None,
    watch: Watch,
    stop_beating: Callable[[], None],
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did.

    Rank 0 keeps ``manager.depth`` batches in flight (two on several ranks): it sends batch b
    once it has recorded batch b - 2, so a worker finds its next order waiting when it reports
    a chunk (the transport keeps each rank's messages in order), and rank 0 measures its own
    chunks in turn, recording each batch after its own chunk of it.

    Every exchange has a deadline (deadlines.py) except a worker's wait for its first order,
    which the heartbeats cover, as they cover the start-up collectives. ``SilentRanks`` leaves
    here on every rank: on rank 0 after the reports that did arrive are recorded, the chunks of
    the ranks that did not answer are kept in the file as in flight and the run is marked
    ``silent_rank``, so that the file keeps every completed configuration and names the lost ones.
    The heartbeats stop with the order to stop: from there on the ranks leave one by one."""
    deadlines = None
    if manager:
        deadlines = Deadlines(floor_s(manager.settings.rank_deadline_floor_s), manager.setup.problem.timeout_s)
    patience_s: float | None = None  # how long a worker waits for its next order
    reported_s = math.nan  # when rank 0 had the last batch's reports
    own: deque[tuple[Order, float]] = deque()  # rank 0's orders in flight, with when each went out
    writing = watch.writing if manager else nullcontext()
    while True:
        batches = []
        if manager:
            assert deadlines is not None
            with timeline.phase("strategy"), writing:
                batches = [deadlines.stamp(orders) for orders in manager.fill()]
        with timeline.phase("wait"):
            if manager:
                for orders in batches:
                    own.append((transport.scatter(orders), time.monotonic()))
                if batches and deadlines is not None and not math.isnan(reported_s):
                    deadlines.turned(time.monotonic() - reported_s)
                order, sent_s = own.popleft()
                # This batch's deadline counts from when its ranks could start it: it went out,
                # and the batch before it was recorded (each rank had finished its chunk of that).
                sent_s = sent_s if math.isnan(reported_s) else max(sent_s, reported_s)
            else:
                order, sent_s = transport.scatter(None, patience_s), time.monotonic()
            timeline.clock.sync(order.now_s)
        patience_s = order.next_order_within_s
        if order.stop is not None:
            stop_beating()
            break
        report = serve(order, backend, transport.rank, timeline, ahead, _stopping(transport, manager))
        with timeline.phase("wait"):
            try:
                reports = transport.gather(report, _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
            except SilentRanks as silent:
                if not manager:
                    raise
                watch.ending = True  # this thread ends the run: the heartbeat thread leaves the file alone
                if silent.heartbeat is None:
                    silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
                _record_silent(manager, transport, timeline, writing, deadlines, silent, report)
                raise
            reported_s = time.monotonic()
            if manager:
                assert reports is not None
                timeline.clock.sync(max(r.now_s for r in reports))
        if manager:
            assert reports is not None and deadlines is not None
            deadlines.observe(next(iter(manager.in_flight.values())).orders, reports)
            with writing:
                _record(manager, timeline, reports)
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    try:
        leftovers = transport.gather(timeline.take(), _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
    except SilentRanks as silent:
        if manager:  # the search is over and recorded: only some timeline rows are missing
            silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
            rows = silent.received
            with writing:
                manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
        raise
    if manager:
        assert leftovers is not None
        with writing:
            manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])
    return order.stop


def _stopping(transport: Transport, manager: Manager | None) -> Callable[[], bool]:
    """Whether the run is being stopped from outside the search (``StopReason.interrupts``),
    asked before each configuration: on rank 0 once the stop is requested, on a worker once
    the order to stop waits behind its chunk. The chunk then ends before its next
    configuration (after its first), so that such a stop comes within a configuration or two
    of the batch rank 0 records when it decides to stop, rather than after the batch already
    on its way too; what was not measured a rerun measures."""
    if manager is not None:
        return lambda: manager.stop_requested is not None
    return lambda: any(isinstance(o, Order) and o.stop is not None and o.stop.interrupts for o in transport.waiting())


def _record(manager: Manager, timeline: Timeline, reports: list[Report]) -> None:
    with timeline.phase("write"):
        results = manager.record(reports)
    with timeline.phase("strategy"):
        manager.tell(results)
        say(manager.progress_line())


def _record_silent(
    manager: Manager,
    transport: Transport,
    timeline: Timeline,
    writing: AbstractContextManager,
    deadlines: Deadlines | None,
    silent: SilentRanks,
    report: Report,
) -> None:
    """Rank 0's record of a run some ranks stopped answering in: what did arrive of the oldest
    batch, and of the batch after it what the live ranks had already sent (rank 0's own chunk
    of it was never measured), is measured work and recorded; the chunks whose reports did not
    come stay recorded as in flight (recording a batch cleared that record), so that ``check``
    names them, as it does after rank 0 was killed. The run is marked ``silent_rank``, and a
    resumed run's strategy starts afresh from the file."""
    manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK
    received = silent.received
    while True:
        batch, flight = next(iter(manager.in_flight.items()))
        reports = [received.get(r, Report((), (), report.now_s)) for r in range(transport.size)]
        if deadlines is not None:
            deadlines.observe(flight.orders, reports)
        with writing:
            _record(manager, timeline, reports)
            lost = [(rank, o.ids) for rank, o in enumerate(flight.orders) if rank not in received and o.ids]
            manager.cache.still_in_flight(batch, lost)
        if not manager.in_flight:
            return
        try:  # the next batch: one last look for what arrived, without waiting
            got = transport.gather(Report((), (), report.now_s), 0.0)
            assert got is not None
            arrived = dict(enumerate(got))
        except SilentRanks as more:
            arrived = more.received
        received = {r: got for r, got in arrived.items() if r != 0}


def _remaining_s(deadline_s: float | None, sent_s: float) -> float | None:
    """What is left of a deadline counted from ``sent_s``; rank 0 measured a chunk of its own
    meanwhile, and a report that is already there must still be looked for."""
    if deadline_s is None:
        return None
    return max(deadline_s - (time.monotonic() - sent_s), _LAST_LOOK_S)
