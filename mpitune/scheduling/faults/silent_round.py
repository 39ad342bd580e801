"""Ranks that did not answer: what rank 0 records before the job ends (ending.py).

When rank 0's wait for reports raises ``SilentRanks`` (rounds.py), every report that came is
measured work and goes into the file, a whole hand-out's held reports too (``Handouts.flush``).
Each report clears its own chunk only, so the chunks whose reports did not come stay recorded
as in flight, and ``check`` names them, as it does after rank 0 was killed. The run is marked
``silent_rank``, a resumed run's strategy starts afresh from the file, and the main thread ends
the run itself (``watch.ending``: the heartbeat thread leaves the file alone).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mpitune.scheduling.handouts import Handouts
from mpitune.scheduling.messages import Order
from mpitune.scheduling.transport import SilentRanks

if TYPE_CHECKING:
    from mpitune.scheduling.rounds import Rank0


def keep_reports(silent: SilentRanks, rank0: Rank0, handouts: Handouts, late: list[tuple[Order, float]]) -> None:
    """Record what came before ``silent`` was raised; ``late``: the orders of the silent ranks
    that were due, each with when it went out (rank 0's monotonic clock). The caller raises
    ``silent`` on."""
    rank0.watch.ending = True
    if silent.heartbeat is None and late:  # a deadline passed: the line says how long was waited for what
        order, sent_s = late[0]
        silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
    with rank0.watch.writing:
        rank0.manager.stop_for_silence()
        handouts.flush()


def keep_last_rows(silent: SilentRanks, rank0: Rank0, sent_s: float) -> None:
    """The search is over and recorded when the last gather (every rank's last timeline rows)
    finds ranks silent: only their rows are missing. Record the rows that arrived; the caller
    raises ``silent`` on."""
    silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
    rows = silent.received
    with rank0.watch.writing:
        rank0.manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
