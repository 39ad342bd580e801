"""Phases of work on one rank, on the run's shared clock.

Every figure mpitune reports is derived from these intervals: wall time, busy and idle time,
efficiency. None comes from sums of per-configuration durations. A replay's simulated clock also
charges what its recorded run spent besides its configurations (model/replay_clock.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

# Every phase a rank records, in the order a person reads them: rank 0 loading the spec (the
# spec file's own code, which may compute a reference answer for seconds, and the checks of
# what it defines), mpitune's start-up, rank 0's strategy, the three phases of measuring,
# timing a reference configuration to compare the ranks' devices (calibration) and the best
# candidates again once the search has ended (confirmation), rank 0 writing
# the file, time lost to a configuration whose worker hung or died and restarting that
# worker, time in no named phase, waiting for others. Files written before "spec" was a
# phase counted loading the spec as start-up.
PHASES = (
    "spec",
    "startup",
    "strategy",
    "compile",
    "verify",
    "benchmark",
    "calibrate",
    "confirm",
    "write",
    "lost",
    "restart",
    "other",
    "wait",
)
# Phases in which a rank waits for others; everything else is work.
IDLE_PHASES = ("wait",)
# Work done beside a rank's own phases, in its child processes: compiling ahead
# (compile_ahead.py), and its measuring worker's own start, from its spawn (before MPI, so
# before the clock's zero, when started early) to its backend imported and its device context
# made (isolation.py). It overlaps them, so it is reported on its own and is no part of the
# rank's wall time. So are rank 0's strategy and writes while its own chunk was measured beside
# them (scheduling/rank.py, ``Lane``): its measuring is its phase then, and these are ``BESIDE`` it.
BESIDE = {"strategy": "strategy_beside", "write": "write_beside"}
BACKGROUND_PHASES = ("compile_ahead", "worker_start", *BESIDE.values())
# Every phase a file's timeline may hold.
RECORDED_PHASES = PHASES + BACKGROUND_PHASES


@dataclass
class Interval:
    start_s: float = 0.0
    end_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class PhaseRow:
    batch: int
    config_id: int
    phase: str
    start_s: float
    end_s: float


# Time between named phases longer than this is recorded as phase "other", so that the
# phases of a rank cover its whole wall time (a descheduled process, bookkeeping).
GAP_S = 1e-3


class Clock:
    """Seconds since the run started, on one rank.

    Real: a monotonic clock counted from a moment all ranks share. Simulated, in a replay of
    measured data: it stands still except where measured durations ``advance`` it. At every
    collective it ``sync``s to the latest rank, as waiting would make it in a real run. Each
    entry into a phase named in ``charges_s`` advances it by that many seconds. That is rank 0's
    own work, at what the replayed run recorded (model/replay_clock.py).
    """

    def __init__(
        self, simulated: bool = False, origin: float | None = None, charges_s: Mapping[str, float] | None = None
    ):
        self.simulated = simulated
        self.charges_s = dict(charges_s or {})
        self._t0 = time.perf_counter() if origin is None else origin
        self._simulated_s = 0.0

    @property
    def origin(self) -> float:
        """The ``time.perf_counter()`` reading that is 0 on this clock.

        The monotonic clock is one per machine. So a worker process given it reads the same times."""
        return self._t0

    def now(self) -> float:
        return self._simulated_s if self.simulated else time.perf_counter() - self._t0

    def shift(self, seconds: float) -> None:
        """Correct a real clock to agree with rank 0's (see comm.start_clock)."""
        self._t0 -= seconds

    def advance(self, seconds: float) -> None:
        if not self.simulated:
            raise RuntimeError("only a simulated clock can be advanced")
        self._simulated_s += seconds

    def sync(self, other_s: float) -> None:
        """Another rank's time at a collective this rank took part in."""
        if self.simulated:
            self._simulated_s = max(self._simulated_s, other_s)


class Timeline:
    """Records the phases of one rank on its ``Clock``."""

    def __init__(self, clock: Clock | None = None, fill_gaps: bool = True):
        self.clock = clock or Clock()
        self.batch = -1
        self.rows: list[PhaseRow] = []
        self.fill_gaps = fill_gaps  # off in worker processes: their parent covers the gaps
        self._last_end_s = 0.0

    @contextmanager
    def phase(self, name: str, config_id: int = -1) -> Iterator[Interval]:
        interval = Interval(start_s=self.clock.now())
        self._fill_gap(interval.start_s)
        try:
            yield interval
        finally:
            if self.clock.simulated and name in self.clock.charges_s:
                self.clock.advance(self.clock.charges_s[name])
            interval.end_s = self._last_end_s = self.clock.now()
            self.rows.append(PhaseRow(self.batch, config_id, name, interval.start_s, interval.end_s))

    def extend(self, rows: list[PhaseRow]) -> None:
        """Phases recorded elsewhere on this clock (a worker process), as part of this batch.

        Background phases stand beside this rank's own and leave its gap accounting alone."""
        for row in rows:
            row.batch = self.batch
            if row.phase not in BACKGROUND_PHASES:
                self._fill_gap(row.start_s)
                self._last_end_s = max(self._last_end_s, row.end_s)
            self.rows.append(row)

    def idle_until(self, now_s: float) -> None:
        """No gap row covers the time before ``now_s``.

        This timeline did no work then, and another timeline covers it. An example is rank 0's
        measuring lane between its chunks (scheduling/rank.py)."""
        self._last_end_s = max(self._last_end_s, now_s)

    def _fill_gap(self, start_s: float) -> None:
        if self.fill_gaps and start_s - self._last_end_s > GAP_S:
            self.rows.append(PhaseRow(self.batch, -1, "other", self._last_end_s, start_s))

    def take(self) -> list[PhaseRow]:
        """Hand over the rows recorded so far, to be sent to rank 0, and forget them."""
        rows, self.rows = self.rows, []
        return rows
