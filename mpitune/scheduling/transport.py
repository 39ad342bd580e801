"""How a run moves data between ranks, without naming MPI: the ``Transport`` interface
(``comm.MpiTransport`` in production), ``LocalTransport`` (a world of one rank, no mpiexec) and
``InProcessRanks`` (rank 0 of several in this process, on simulated clocks).

Each wait takes a deadline. A rank can stop answering without dying (faults/liveness.py), and a
collective would wait for it, with the file locked, until Slurm notices. Instead a rank learns
``SilentRanks``, naming who did not answer: rank 0 saves what arrived and ends the job.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from mpitune.backends.base import Backend
from mpitune.model.problem import Kernel, Problem
from mpitune.model.timeline import Clock, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.faults.liveness import Silence
from mpitune.scheduling.faults.world import WorldError
from mpitune.scheduling.messages import Order, interrupted
from mpitune.scheduling.rank import carry_out

T = TypeVar("T")


class SilentRanks(Exception):
    """Ranks that did not answer within a deadline: on rank 0 the workers whose reports did not
    arrive, on a worker rank 0 itself. ``received`` holds, by rank, what did arrive; rank 0 records
    those reports. ``expected_s``: what the batch should have taken (None: unknown). ``error``: what
    MPI said when it found a peer gone before any deadline passed. ``heartbeat``: the silence the
    heartbeats found, when they ended the wait."""

    def __init__(
        self,
        ranks: Sequence[int],
        hosts: Sequence[str],
        waited_s: float,
        received: dict[int, Any],
        expected_s: float | None = None,
        error: str = "",
        heartbeat: Silence | None = None,
    ):
        self.ranks, self.hosts, self.waited_s, self.received = tuple(ranks), tuple(hosts), waited_s, received
        self.expected_s, self.error, self.heartbeat = expected_s, error, heartbeat
        super().__init__(f"{who(self.ranks, self.hosts)} did not answer within {waited_s:.1f} s {error}".strip())


# Between two looks for a message a rank sleeps from _FIRST_PAUSE_S, doubling up to _MAX_PAUSE_S:
# a message is at most that late, and a rank that waits minutes uses next to no CPU (a blocking
# MPICH receive spins a core that the kernels share).
_FIRST_PAUSE_S = 20e-6
_MAX_PAUSE_S = 1e-3


def pauses() -> Iterator[float]:
    """How long to sleep after each look that found nothing (comm.py's waits, rank 0's rounds)."""
    pause_s = _FIRST_PAUSE_S
    while True:
        yield pause_s
        pause_s = min(2 * pause_s, _MAX_PAUSE_S)


def who(ranks: Sequence[int], hosts: Sequence[str]) -> str:
    """'rank 2 on node2', or 'ranks 1 (on node1), 2 (on node2)' for several."""
    if len(ranks) == 1:
        return f"rank {ranks[0]} on {hosts[0]}"
    return "ranks " + ", ".join(f"{r} (on {h})" for r, h in zip(ranks, hosts))


class Transport(Protocol):
    """Collectives over the ranks of one job, rooted at rank 0. Every rank calls each of them in the
    same order, or the job hangs."""

    rank: int
    size: int
    node_rank: int  # this rank's place among the ranks of its node: which device is its own
    node_size: int
    hosts: tuple[str, ...]  # every rank's host name, as the start-up Placement records it

    def bcast(self, value: T | None) -> T:
        """Rank 0's value on every rank.

        Args:
            value: rank 0's; ignored elsewhere.

        Returns:
            Rank 0's value.
        """
        ...

    def scatter(self, values: Sequence[T] | None, deadline_s: float | None = None) -> T:
        """Rank 0's ``values[r]`` on rank r; rank 0 never waits for the workers here.

        Args:
            values: rank 0's, one per rank; None elsewhere.
            deadline_s: how long a worker waits for its value; None: no limit.

        Returns:
            This rank's value.

        Raises:
            SilentRanks: on a worker, naming rank 0, when its value has not come in time.
        """
        ...

    def gather(self, value: T, deadline_s: float | None = None) -> list[T] | None:
        """Every rank's value on rank 0, in rank order.

        Args:
            value: this rank's.
            deadline_s: how long the call may take; None: no limit.

        Returns:
            On rank 0 every rank's value; None elsewhere.

        Raises:
            SilentRanks: on rank 0 naming the ranks whose value is late; on a worker naming rank 0,
                when rank 0 has not taken its value in time.
        """
        ...

    def send(self, rank: int, value: Any) -> None:
        """Rank 0's value to one worker, which takes it as its next ``scatter`` does. Never waits.

        Args:
            rank: the worker.
            value: what it is sent.
        """
        ...

    def receive(self, due: Mapping[int, float], wait: bool = True) -> tuple[int, Any] | None:
        """On rank 0, the next value a worker's ``gather`` sent, from any worker.

        Args:
            due: each worker waited for, and when (``time.monotonic()``) its value is due.
            wait: whether to wait for one; else look once.

        Returns:
            ``(rank, value)``; None when none has arrived and ``wait`` is False.

        Raises:
            SilentRanks: naming the ranks whose value is late, or that MPI finds gone.
        """
        ...

    def waiting(self) -> list[Any]:
        """On a worker, what rank 0 sent that ``scatter`` has not yet returned, oldest first; [] on
        rank 0. An order to stop may wait behind the next chunk. Never blocks. Raises
        ``SilentRanks`` naming rank 0 when MPI finds it gone."""
        ...

    def allgather(self, value: T) -> list[T]: ...

    def start_clock(self, simulated: bool = False, since: float | None = None) -> tuple[Clock, float]:
        """One clock for every rank's timeline, and the run's start in Unix time. ``since``: rank
        0's ``time.perf_counter()`` when the run began before this call."""
        ...

    def bcast_problem(self, problem: Problem | None) -> Kernel:
        """Rank 0's problem, as workers need it: its kernel (``Problem.for_workers``)."""
        ...

    def world_error(self) -> WorldError | None:
        """Why this world cannot be one tuning job (faults/world.py); None if it can."""
        ...


def first_error(transport: Transport, error: str | None) -> str | None:
    """Collective: every rank learns the first rank's error, so all of them stop together."""
    errors = transport.allgather(error)
    for rank, err in enumerate(errors):
        if err:
            return err if transport.size == 1 or rank == 0 else f"rank {rank}: {err}"
    return None


# How long a worker waits, after its last report, for rank 0 to say that the file is closed.
CLOSE_WAIT_S = 60.0


def leave_together(transport: Transport) -> None:
    """Every rank leaves once rank 0 has closed the file; rank 0 calls this after closing it.

    Under ``srun --wait=N`` (cli/job.py) the first task to exit starts srun's countdown to
    killing the rest. Workers that left at once gave rank 0 only N seconds for its last write; on a
    loaded node srun killed it while it closed the file. A rank 0 that never says so keeps a worker
    ``CLOSE_WAIT_S`` at most; the launcher ends it sooner."""
    if transport.rank == 0:
        transport.scatter([None] * transport.size)
        return
    with contextlib.suppress(SilentRanks):  # nothing of this rank's is left unsaved: the file is rank 0's
        transport.scatter(None, CLOSE_WAIT_S)


class LocalTransport:
    """A world of one rank in this process: every collective is a no-op, and no deadline can pass."""

    rank = 0
    size = 1
    node_rank = 0
    node_size = 1

    def __init__(self) -> None:
        self.hosts: tuple[str, ...] = (socket.gethostname(),)

    def bcast(self, value: T | None) -> T:
        return value  # type: ignore[return-value]  # rank 0 is every rank

    def scatter(self, values: Sequence[T] | None, deadline_s: float | None = None) -> T:
        assert values is not None, "rank 0 scatters"
        return values[0]

    def gather(self, value: T, deadline_s: float | None = None) -> list[T] | None:
        return [value]

    def send(self, rank: int, value: Any) -> None:
        raise AssertionError("a world of one rank has no worker to send to")

    def receive(self, due: Mapping[int, float], wait: bool = True) -> tuple[int, Any] | None:
        raise AssertionError("a world of one rank has no worker to hear from")

    def waiting(self) -> list[Any]:
        return []

    def allgather(self, value: T) -> list[T]:
        return [value]

    def start_clock(self, simulated: bool = False, since: float | None = None) -> tuple[Clock, float]:
        clock = Clock(simulated, origin=since)
        return clock, time.time() - (0.0 if simulated else clock.now())

    def bcast_problem(self, problem: Problem | None) -> Kernel:
        assert problem is not None, "rank 0 holds the problem"
        return problem.for_workers()

    def world_error(self) -> WorldError | None:
        return None


class InProcessRanks(LocalTransport):
    """Rank 0 of a world of ``len(backends)`` ranks in this process; no deadline can pass.

    Rank r > 0 measures with ``backends[r]``, ``timelines[r]`` and ``aheads[r]``. What rank 0
    scatters waits in each rank's inbox, in order, as MPI keeps it; each gather is when the ranks
    carry out their oldest order. An order ``send`` hands one rank is carried out at once, on that
    rank's clock; its answer waits for the ``receive`` that takes it, the earliest by the clocks. A
    later stop cannot end such a chunk early, as it would on a real rank."""

    def __init__(
        self,
        backends: Sequence[Backend],
        timelines: Sequence[Timeline],
        aheads: Sequence[CompilePool | None] | None = None,
    ):
        super().__init__()
        self.size = self.node_size = len(backends)
        self.hosts = self.hosts * self.size
        self.backends, self.timelines = list(backends), list(timelines)
        self.aheads = list(aheads) if aheads is not None else [None] * self.size  # each rank's compile workers
        self.inboxes: list[deque[Any]] = [deque() for _ in range(self.size)]
        self.outboxes: list[deque[Any]] = [deque() for _ in range(self.size)]  # answers of orders sent alone

    def scatter(self, values: Sequence[T] | None, deadline_s: float | None = None) -> T:
        assert values is not None, "rank 0 scatters"
        for inbox, value in zip(self.inboxes[1:], values[1:]):
            inbox.append(value)
        return values[0]

    def gather(self, value: T, deadline_s: float | None = None) -> list[T] | None:
        answers = [self.outboxes[r].popleft() if self.outboxes[r] else self._answer(r) for r in range(1, self.size)]
        return [value, *answers]

    def send(self, rank: int, value: Any) -> None:
        if isinstance(value, Order) and value.hold:
            return  # a rank in this process has no deadline to lift
        self.inboxes[rank].append(value)
        self.outboxes[rank].append(self._answer(rank))

    def receive(self, due: Mapping[int, float], wait: bool = True) -> tuple[int, Any] | None:
        heads = [(self.outboxes[rank][0].now_s, rank) for rank in due if self.outboxes[rank]]
        assert heads or not wait, "rank 0 waits for a report that no order will bring"
        if not heads:
            return None
        now_s, rank = min(heads)
        if not wait and now_s > self.timelines[0].clock.now():
            return None
        return rank, self.outboxes[rank].popleft()

    def _answer(self, rank: int) -> Any:
        inbox, timeline = self.inboxes[rank], self.timelines[rank]
        order = inbox.popleft()
        assert isinstance(order, Order), "a gather answers an order"
        timeline.clock.sync(order.now_s)
        if order.stop is not None:
            return timeline.take()
        return carry_out(order, self.backends[rank], rank, timeline, self.aheads[rank], lambda: interrupted(inbox))

    def allgather(self, value: T) -> list[T]:
        return [value] * self.size
