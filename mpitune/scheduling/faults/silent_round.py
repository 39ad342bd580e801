"""Ranks that did not answer: what rank 0 records before the job ends (ending.py). Every report that
came is measured work and goes into the file (``Handouts.flush``). The chunks whose reports did not
come stay in flight, for ``check`` to name. The run is marked ``silent_rank``, and the main thread
ends it itself (``watch.ending``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mpitune.scheduling.handouts import Handouts
from mpitune.scheduling.messages import Order
from mpitune.scheduling.transport import SilentRanks

if TYPE_CHECKING:
    from mpitune.scheduling.rounds import Rank0


def keep_reports(silent: SilentRanks, rank0: Rank0, handouts: Handouts, late: list[tuple[Order, float]]) -> None:
    """Record what came before ``silent`` was raised; the caller raises it on. ``late``: the silent
    ranks' orders that were due, each with when it went out (rank 0's monotonic clock)."""
    rank0.watch.ending = True
    if silent.heartbeat is None and late:  # a deadline passed: the line says how long was waited for what
        order, sent_s = late[0]
        silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
    with rank0.watch.writing:
        rank0.manager.stop_for_silence()
        handouts.flush()


def keep_last_rows(silent: SilentRanks, rank0: Rank0, sent_s: float) -> None:
    """Record the last rows that arrived when the last gather finds ranks silent. The search is over
    and recorded: only their rows are missing. The caller raises ``silent`` on."""
    silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
    rows = silent.received
    with rank0.watch.writing:
        rank0.manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
