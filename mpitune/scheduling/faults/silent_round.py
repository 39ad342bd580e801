"""A round some ranks did not answer: what rank 0 records of it before the job ends (ending.py).

A gather that raises ``SilentRanks`` on rank 0 leaves the rounds (rounds.py) through here. What
did arrive of the oldest batch, and of the batch after it what the live ranks had already sent
(rank 0's own chunk of it was never measured), is measured work and recorded; the chunks whose
reports did not come stay recorded as in flight (recording a batch cleared that record), so
that ``check`` names them, as it does after rank 0 was killed. The run is marked
``silent_rank``, and a resumed run's strategy starts afresh from the file. The main thread ends
the run itself from here on (``watch.ending``): the heartbeat thread leaves the file alone.
"""

from __future__ import annotations

import time

from mpitune.model.timeline import Timeline
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.session import Rank0
from mpitune.scheduling.transport import SilentRanks, Transport


def keep_round(
    silent: SilentRanks,
    rank0: Rank0,
    transport: Transport,
    timeline: Timeline,
    order: Order,
    sent_s: float,
    own: Report,
) -> None:
    """Record what arrived of the batches in flight when the gather for ``order`` (sent at
    ``sent_s``, on rank 0's monotonic clock; ``own``: rank 0's report of it) found ranks silent;
    the caller raises ``silent`` on."""
    rank0.watch.ending = True
    if silent.heartbeat is None:  # a deadline passed: the line says how long was waited for what
        silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
    manager = rank0.manager
    manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK
    received = silent.received
    while True:
        batch, flight = next(iter(manager.in_flight.items()))
        reports = [received.get(r, Report((), (), own.now_s)) for r in range(transport.size)]
        rank0.deadlines.observe(flight.orders, reports)
        with rank0.watch.writing:
            rank0.record(timeline, reports)
            lost = [(rank, o.ids) for rank, o in enumerate(flight.orders) if rank not in received and o.ids]
            manager.cache.still_in_flight(batch, lost)
        if not manager.in_flight:
            return
        try:  # the next batch: one last look for what arrived, without waiting
            got = transport.gather(Report((), (), own.now_s), 0.0)
            assert got is not None
            arrived = dict(enumerate(got))
        except SilentRanks as more:
            arrived = more.received
        received = {r: got for r, got in arrived.items() if r != 0}


def keep_last_rows(silent: SilentRanks, rank0: Rank0, sent_s: float) -> None:
    """The search is over and recorded when the last gather (every rank's last timeline rows)
    finds ranks silent: only their rows are missing. Record the rows that arrived; the caller
    raises ``silent`` on."""
    silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
    rows = silent.received
    with rank0.watch.writing:
        rank0.manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
