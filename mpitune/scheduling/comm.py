"""The MPI transport: collectives, the shared clock, broadcasting the problem. Only this module and
faults/heartbeat.py import mpi4py.

A round's orders and reports travel point to point, one tagged message per worker each way: a
collective cannot be given up on, so a silent rank would hold rank 0 in it for good. The receiver
looks for the message (``improbe``) between pauses, until it comes or the deadline passes. MPI keeps
each sender's messages of one tag in order, and rank 0 keeps what arrived early for the gather it
belongs to.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
from mpi4py import MPI

from mpitune.model.problem import Kernel, Problem
from mpitune.model.timeline import Clock
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.faults.world import WorldError, check_world
from mpitune.scheduling.transport import SilentRanks, pauses

__all__ = ["MPI", "MpiTransport", "bcast_arrays", "bcast_problem", "start_clock"]

T = TypeVar("T")
log = logging.getLogger(__name__)

_CLOCK_TAG = 7
_CLOCK_ROUNDS = 5
_ORDER_TAG = 11  # rank 0 -> worker: the round's Order
_REPORT_TAG = 12  # worker -> rank 0: what it measured (or, at the end, its last timeline rows)


def start_clock(comm: MPI.Comm, simulated: bool = False, since: float | None = None) -> tuple[Clock, float]:
    """One clock for every rank's timeline, and the run's start in Unix time.

    Each rank counts from a barrier, then corrects for when it left it by a few ping-pongs with rank
    0. The offset of the shortest round trip is kept: its error is at most half that trip.
    ``since``: rank 0's ``time.perf_counter()`` when the run began before the barrier; every clock
    then counts from it."""
    comm.Barrier()
    clock = Clock(simulated)
    if comm.rank == 0:
        for rank in range(1, comm.size):
            for _ in range(_CLOCK_ROUNDS):
                comm.recv(source=rank, tag=_CLOCK_TAG)
                comm.send(clock.now(), dest=rank, tag=_CLOCK_TAG)
    else:
        best_rtt_s, offset_s = math.inf, 0.0
        for _ in range(_CLOCK_ROUNDS):
            sent_s = clock.now()
            comm.send(None, dest=0, tag=_CLOCK_TAG)
            root_s = comm.recv(source=0, tag=_CLOCK_TAG)
            back_s = clock.now()
            if back_s - sent_s < best_rtt_s:
                best_rtt_s, offset_s = back_s - sent_s, root_s - (sent_s + back_s) / 2
        clock.shift(offset_s)
    lead_s = max(0.0, clock.origin - since) if comm.rank == 0 and since is not None else 0.0
    started_unix, lead_s = comm.bcast((time.time() - lead_s, lead_s), root=0)
    clock.shift(lead_s)
    return clock, started_unix


@dataclass
class _ArrayRef:
    index: int


def bcast_arrays(comm: MPI.Comm, arrays: list[np.ndarray] | None) -> list[np.ndarray]:
    """Broadcast numpy arrays as raw buffers (no pickling of the data)."""
    meta = comm.bcast(None if arrays is None else [(a.shape, a.dtype.str) for a in arrays], root=0)
    out = []
    for i, (shape, dtype) in enumerate(meta):
        buf = np.empty(shape, dtype) if arrays is None else np.ascontiguousarray(arrays[i])
        comm.Bcast(buf, root=0)
        out.append(buf)
    return out


def bcast_problem(comm: MPI.Comm, problem: Problem | None) -> Kernel:
    """Send the problem's kernel once: arrays as buffers, the small rest pickled. The restrictions,
    aim and search space stay on rank 0, which sends each configuration with its order."""
    arrays: list[np.ndarray] = []
    skeleton = None
    if comm.rank == 0:
        assert problem is not None, "rank 0 holds the problem"

        def ref(a: Any) -> Any:
            if isinstance(a, np.ndarray):
                arrays.append(a)
                return _ArrayRef(len(arrays) - 1)
            return a

        skeleton = _mapped(problem.for_workers(), ref)
    skeleton = comm.bcast(skeleton, root=0)
    arrays = bcast_arrays(comm, arrays if comm.rank == 0 else None)
    return _mapped(skeleton, lambda a: arrays[a.index] if isinstance(a, _ArrayRef) else a)


def _mapped(problem: Kernel, f: Callable[[Any], Any]) -> Kernel:
    """``problem`` with ``f`` applied to each of its arguments and answers."""
    answer = None if problem.answer is None else [f(a) for a in problem.answer]
    return replace(problem, arguments=[f(a) for a in problem.arguments], answer=answer)


def _error_text(exc: MPI.Exception) -> str:
    """MPI's error, in one line."""
    return " ".join(str(exc.Get_error_string()).split())


class MpiTransport:
    """The ranks of an MPI communicator (COMM_WORLD in a run); see transport.Transport.

    ``watch`` is what rank 0's main thread shares with its heartbeat thread (faults/liveness.py). A
    gather also ends when the heartbeats found a worker silent, whatever is left of its deadline."""

    def __init__(self, comm: MPI.Comm, watch: Watch | None = None):
        self.comm = comm
        self.watch = watch or Watch()
        self.rank, self.size = comm.rank, comm.size
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # collective: every rank constructs one
        self.node_rank, self.node_size = node.rank, node.size
        node.Free()
        # Every rank knows every host, so that a worker can name rank 0's when rank 0 goes silent.
        self.hosts: tuple[str, ...] = tuple(comm.allgather(socket.gethostname()))
        self._sending: list[MPI.Request] = []  # rank 0's orders not yet taken by their rank
        self._unreachable: dict[int, str] = {}  # ranks an order could not be sent to, and MPI's error
        self._early: defaultdict[int, deque[Any]] = defaultdict(deque)  # by rank: reports for later gathers
        self._orders: deque[Any] = deque()  # a worker's orders received by ``waiting``, not yet taken

    def bcast(self, value: T | None) -> T:
        got: T = self.comm.bcast(value, root=0)
        return got

    def scatter(self, values: Sequence[T] | None, deadline_s: float | None = None) -> T:
        if self.rank != 0:
            received: T = self._receive(deadline_s)
            return received
        assert values is not None, "rank 0 scatters"
        for rank in range(1, self.size):
            self.send(rank, values[rank])
        return values[0]

    def gather(self, value: T, deadline_s: float | None = None) -> list[T] | None:
        if self.rank != 0:
            self._send(value, deadline_s)
            return None
        self.watch.polling = True
        try:
            return self._gather(value, deadline_s)
        finally:
            self.watch.polling = False

    def _gather(self, value: T, deadline_s: float | None) -> list[T]:
        """Rank 0's side of ``gather``."""
        started_s = time.monotonic()
        received: dict[int, T] = {0: value}
        for rank, early in self._early.items():
            if early:
                received[rank] = early.popleft()
        status = MPI.Status()
        error = ""
        for pause_s in pauses():
            try:
                while (message := self.comm.improbe(MPI.ANY_SOURCE, _REPORT_TAG, status)) is not None:
                    source = status.Get_source()
                    if source in received:
                        self._early[source].append(message.recv())
                    else:
                        received[source] = message.recv()
            except MPI.Exception as exc:  # a peer MPI found dead: no use waiting for the others
                error = _error_text(exc)
            if len(received) == self.size:
                break
            waited_s = time.monotonic() - started_s
            if not error:
                self._unheard(received)
            if (
                error
                or (deadline_s is not None and waited_s > deadline_s)
                or (len(received) + len(self._unreachable) == self.size)
            ):
                raise self._silent([r for r in range(self.size) if r not in received], waited_s, received, error)
            time.sleep(pause_s)
        # Every worker answered, so it took its order: those sends are complete.
        self._sending = [r for r in self._sending if not r.Test()]
        return [received[r] for r in range(self.size)]

    def send(self, rank: int, value: Any) -> None:
        # Without waiting: a large order to a rank that stopped answering would otherwise hold
        # rank 0 here, before the deadline of the receive that follows can notice it.
        self._sending = [r for r in self._sending if not r.Test()]
        try:
            self._sending.append(self.comm.isend(value, dest=rank, tag=_ORDER_TAG))
        except MPI.Exception as exc:  # a peer MPI knows is gone: the next receive or gather names it
            self._unreachable[rank] = _error_text(exc)

    def settle(self, within_s: float) -> None:
        """Rank 0's orders taken, within ``within_s``: a communicator is then freed with no send of
        its own pending. Every worker has taken its last order once the ranks left together."""
        deadline_s = time.monotonic() + within_s
        for pause_s in pauses():
            self._sending = [r for r in self._sending if not r.Test()]
            if not self._sending or time.monotonic() > deadline_s:
                return
            time.sleep(pause_s)

    def _unheard(self, received: dict[int, Any]) -> None:
        """End rank 0's wait once the heartbeats found a worker silent, whatever its deadline."""
        silence = self.watch.silence
        if silence is not None:
            self.watch.ending = True
            hosts = [self.hosts[r] for r in silence.ranks]
            raise SilentRanks(silence.ranks, hosts, silence.longest_s, received, heartbeat=silence)

    def _silent(self, ranks: list[int], waited_s: float, received: dict[int, Any], error: str) -> SilentRanks:
        """``ranks`` silent: with MPI's ``error``, else what it said when an order to one failed."""
        error = error or "; ".join(self._unreachable[r] for r in ranks if r in self._unreachable)
        return SilentRanks(ranks, [self.hosts[r] for r in ranks], waited_s, received, error=error)

    def receive(self, due: Mapping[int, float], wait: bool = True) -> tuple[int, Any] | None:
        for rank, early in self._early.items():
            if early and rank in due:
                return rank, early.popleft()
        self.watch.polling = True
        try:
            return self._receive_any(due, wait)
        finally:
            self.watch.polling = False

    def _receive_any(self, due: Mapping[int, float], wait: bool) -> tuple[int, Any] | None:
        """Rank 0's side of ``receive``."""
        started_s = time.monotonic()
        status = MPI.Status()
        for pause_s in pauses():
            error = ""
            try:
                while (message := self.comm.improbe(MPI.ANY_SOURCE, _REPORT_TAG, status)) is not None:
                    source = status.Get_source()
                    if source in due:
                        return source, message.recv()
                    self._early[source].append(message.recv())  # a stopped worker's last rows: the gather's
            except MPI.Exception as exc:  # a peer MPI found dead
                error = _error_text(exc)
            if not error:
                self._unheard({})
            now_s = time.monotonic()
            late = sorted(r for r, due_s in due.items() if now_s > due_s or r in self._unreachable or error)
            if late:
                raise self._silent(late, now_s - started_s, {}, error)
            if not wait:
                return None
            time.sleep(pause_s)
        raise AssertionError("not reached")

    def waiting(self) -> list[Any]:
        if self.rank == 0:
            return []
        try:
            while (message := self.comm.improbe(0, _ORDER_TAG)) is not None:
                self._orders.append(message.recv())
        except MPI.Exception as exc:  # rank 0 gone (MPI may say so once only): end now
            self._silent_root(time.monotonic(), 0.0, _error_text(exc))
        return list(self._orders)

    def _receive(self, deadline_s: float | None) -> Any:
        """A worker's next order from rank 0, or SilentRanks naming rank 0 after ``deadline_s``."""
        if self._orders:
            return self._orders.popleft()
        started_s = time.monotonic()
        for pause_s in pauses():
            try:
                message = self.comm.improbe(0, _ORDER_TAG)
                if message is not None:
                    return message.recv()
            except MPI.Exception as exc:
                self._silent_root(started_s, 0.0, _error_text(exc))
            self._silent_root(started_s, deadline_s)
            time.sleep(pause_s)
        raise AssertionError("not reached")

    def _send(self, value: T, deadline_s: float | None) -> None:
        """A worker's report to rank 0. A small one leaves at once, a large one once rank 0 takes
        it."""
        # First a look for orders: where rank 0's process is gone, MPI says so here at once,
        # while a send could hold this rank retrying a lost connection.
        self.waiting()
        started_s = time.monotonic()
        try:
            request = self.comm.isend(value, dest=0, tag=_REPORT_TAG)
            for pause_s in pauses():
                if request.Test():
                    return
                self._silent_root(started_s, deadline_s)
                time.sleep(pause_s)
        except MPI.Exception as exc:
            self._silent_root(started_s, 0.0, _error_text(exc))

    def _silent_root(self, started_s: float, deadline_s: float | None, error: str = "") -> None:
        waited_s = time.monotonic() - started_s
        if deadline_s is not None and waited_s >= deadline_s:
            raise self._silent([0], waited_s, {}, error)

    def allgather(self, value: T) -> list[T]:
        return self.comm.allgather(value)

    def start_clock(self, simulated: bool = False, since: float | None = None) -> tuple[Clock, float]:
        return start_clock(self.comm, simulated, since)

    def bcast_problem(self, problem: Problem | None) -> Kernel:
        return bcast_problem(self.comm, problem)

    def world_error(self) -> WorldError | None:
        library = " ".join(MPI.Get_library_version().splitlines()[0].split())  # for the line that names it
        check = check_world(self.size, os.environ, library)
        if check.warning:
            log.warning("%s", check.warning)
        return check.error
