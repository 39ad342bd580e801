"""What travels between rank 0 and the other ranks, and why a run stopped.

Each round rank 0 sends every rank an ``Order``, and every rank answers with a ``Report``. The
transport pickles both, so they hold plain values only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mpitune.exits import ExitCode
from mpitune.model.judging.racing import Race
from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.model.work import Launch, Retime, Work


class StopReason(enum.Enum):
    """Why rank 0 stopped handing out batches; the value is what the file's ``runs.status`` says."""

    FINISHED = "finished"  # the strategy has nothing left
    MAX_FEVALS = "max_fevals"
    TIME_LIMIT = "time_limit"
    SIGNAL = "signal"  # SIGTERM, SIGUSR1 or the stop file: the job is about to be ended
    DEVICE_ERROR = "device_error"  # a rank's device can no longer be trusted
    SPEC_ERROR = "spec_error"  # a spec's per-configuration callable failed
    SILENT_RANK = "silent_rank"  # a rank did not answer within its batch's deadline (faults/deadlines.py)
    FILE_LOST = "file_lost"  # the results file was removed, replaced or truncated (store/custody.py)

    @property
    def resumable(self) -> bool:
        """Whether the search was cut short, so that the same command continues it."""
        return self in (StopReason.SIGNAL, StopReason.TIME_LIMIT, StopReason.DEVICE_ERROR, StopReason.SILENT_RANK)

    @property
    def interrupts(self) -> bool:
        """Whether it comes from outside the search: a signal or the stop file, a lost device, a
        silent rank, a lost results file. The ranks then stop before their next configuration. A
        search that ended on its own finishes the batches in flight."""
        return self in (StopReason.SIGNAL, StopReason.DEVICE_ERROR, StopReason.SILENT_RANK, StopReason.FILE_LOST)

    @property
    def exit_code(self) -> ExitCode:
        if self is StopReason.SPEC_ERROR:
            return ExitCode.USER_ERROR
        if self is StopReason.FILE_LOST:
            return ExitCode.CANNOT_WRITE
        return ExitCode.RESUMABLE if self.resumable else ExitCode.OK


@dataclass(frozen=True)
class Order:
    """Rank 0's message to one rank each round: its chunk of configurations, or stop. It travels
    whole to the code that measures it (rank.carry_out)."""

    now_s: float  # rank 0's clock, to which a simulated clock catches up
    batch: int = -1
    work: tuple[Work, ...] = ()  # may be empty: more ranks than configurations in the batch
    stop: StopReason | None = None
    # The best median known and the run's noise ratio, to race against (model/judging/racing.py);
    # None when racing is off: turned off in the spec, or an objective other than time.
    race: Race | None = None
    # Instead of a chunk: the candidates to time again once the search has ended (confirmation).
    retime: Retime | None = None
    # Before the chunk: the reference every rank times now and then (calibration); None mostly.
    calibrate: Retime | None = None
    # Its allowance (faults/deadlines.py, ``Allowance``): what the batch should take, and how long
    # each side waits before calling the other silent (None: no history yet, no limit).
    expected_s: float | None = None
    deadline_s: float | None = None
    next_order_within_s: float | None = None
    # Nothing to do until the next order, which may be long in coming: the job's other device models
    # still search (devices/models.py). It is not reported, and the next order has no deadline.
    hold: bool = False

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(w.config_id for w in self.work)

    @property
    def size(self) -> int:
        """The configurations this order has the rank compile and launch: its chunk's, or the
        candidates it times again (each costs about one configuration of the search)."""
        return sum(len(r.work) for r in (self.retime, self.calibrate) if r is not None) + len(self.work)


def interrupted(pending: Iterable[Any]) -> bool:
    """Whether an order to stop from outside the search (``StopReason.interrupts``) waits among what
    a worker received and has not carried out. It then ends its chunk early."""
    return any(isinstance(o, Order) and o.stop is not None and o.stop.interrupts for o in pending)


@dataclass(frozen=True)
class Report:
    """One rank's answer to an order: what it measured, what it did meanwhile, its clock, and why
    its device can no longer be trusted ('' while it can)."""

    results: tuple[Result, ...]
    phases: tuple[PhaseRow, ...]
    now_s: float
    fatal_error: str = ""
    launches: tuple[Launch, ...] = ()  # an order to retime's answer
    calibration: tuple[Launch, ...] = ()  # the reference's launches, when the order had one


@dataclass(frozen=True)
class Placement:
    """Where one rank runs, gathered at rank 0 once at start-up for the file and the first line."""

    host: str
    device: str
    device_detail: str
    pid: int
    compile_workers: int
