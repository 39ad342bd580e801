"""Every rank's heartbeat thread: a tiny message to its peers every few seconds, and the alarm
when a peer has sent none for the liveness timeout (liveness.py says why and how long).

A thread, because the rank's main thread is often busy for long: measuring its chunk (rank 0
too), writing the file, asking the strategy, or blocked in a start-up collective. The main
thread's blocking MPI calls and sleeps release Python's GIL, so this thread runs meanwhile.

Workers beat to rank 0 and rank 0 to every worker, on a communicator of their own (a
duplicate of COMM_WORLD, made right after MPI is up), so that no heartbeat is ever taken for a
round's order or report (comm.py) and none left unreceived when the ranks leave one by one
troubles COMM_WORLD: MPICH 5.0's ``MPI_Finalize`` failed on COMM_WORLD ("being freed has 1
unmatched message(s)"), and its launcher then killed the job, after matched probes of
heartbeats there. A heartbeat is (Unix time, host name): the host, so that a rank names a
silent peer's host before the start-up exchange has told it.

Each look takes in every beat that has arrived, not only those MPI has already matched: MPICH
moves at most one message into the queue a probe searches per probe that finds nothing, and
looks that stopped at the first empty probe let the beats pile up unread while rank 0's main
thread made no MPI call: on a busy node, a live rank was named silent beside a stopped one
(docs/reliability.md, "Heartbeats").

A second thread, the watchdog, makes no MPI call: it raises the same alarm once a peer has been
silent for ``WATCHDOG_FACTOR`` timeouts. When a peer's node vanishes, MPI's TCP transport can
hold every thread that calls into MPI (the heartbeat thread and the main thread alike) while it
retries the lost connection, so the heartbeat thread never judges the silence; a worker
holding two batches (it was not waiting on rank 0 when rank 0's node went) was held so for
minutes.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence

from mpi4py import MPI

from mpitune.scheduling.faults.liveness import Liveness, Silence, interval_s

_HEARTBEAT_TAG = 13
WATCHDOG_FACTOR = 1.5
# A look ends after this many probes in a row found no beat, and two more per peer: a probe that
# finds nothing moves one message in, perhaps one of a round's reports queued ahead of the beats
# (a few per worker while rank 0's main thread is busy). Microseconds each.
QUIET_PROBES = 8

log = logging.getLogger(__name__)


class Heartbeat:
    """This rank's heartbeat thread on ``comm`` (its own communicator); ``on_silence`` is called
    once, in the thread, when a peer has been silent for longer than ``timeout_s`` (and is
    expected to end the job)."""

    def __init__(self, comm: MPI.Comm, timeout_s: float, on_silence: Callable[[Silence], None]):
        self.comm, self.timeout_s, self.on_silence = comm, timeout_s, on_silence
        self.peers = list(range(1, comm.size)) if comm.rank == 0 else [0]
        self.liveness = Liveness(self.peers, timeout_s, time.monotonic())
        self.interval_s = interval_s(timeout_s)
        self.quiet_probes = QUIET_PROBES + 2 * len(self.peers)
        self._host = socket.gethostname()
        self._sending: list[MPI.Request] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # between stop() and the thread deciding to raise the alarm
        self._stopping = self._alarmed = False
        self._failed = ""  # what MPI said when a beat could not go out, once
        self._thread = threading.Thread(target=self._run, name="mpitune-heartbeat", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="mpitune-watchdog", daemon=True)

    @classmethod
    def start(
        cls,
        comm: MPI.Comm,
        timeout_s: float,
        on_silence: Callable[[Silence], None],
        thread_level: int | None = None,
    ) -> Heartbeat | None:
        """The running heartbeat of this rank, on a duplicate of ``comm``; None for a world of
        one rank, a timeout of 0 (turned off), or an MPI library that gives less than
        ``MPI_THREAD_MULTIPLE`` (``thread_level``: what it gives, as ``MPI.Query_thread()`` says
        unless told; mpi4py asks for it by default), where the per-batch deadline alone catches
        a silent rank. Collective, unless it returns None on every rank (the same settings and
        library on every rank); the duplicate is never freed, which MPI_Finalize allows."""
        if comm.size == 1 or timeout_s <= 0:
            return None
        provided = MPI.Query_thread() if thread_level is None else thread_level
        if provided < MPI.THREAD_MULTIPLE:
            if comm.rank == 0:
                log.warning(
                    "the MPI library gives thread level %d, less than MPI_THREAD_MULTIPLE (%d): no heartbeats; a "
                    "silent rank is noticed only once its batch is overdue (docs/reliability.md)",
                    provided,
                    MPI.THREAD_MULTIPLE,
                )
            return None
        heartbeat = cls(comm.Dup(), timeout_s, on_silence)
        heartbeat._thread.start()
        heartbeat._watchdog.start()
        return heartbeat

    def know_hosts(self, hosts: Sequence[str]) -> None:
        self.liveness.know_hosts(hosts)

    def stop(self) -> None:
        """No more heartbeats, sent or expected: the run is ending cleanly, and the ranks leave
        at different moments. Waits for the thread unless it is raising its alarm."""
        with self._lock:
            first, self._stopping = not self._stopping, True
            alarmed = self._alarmed
        self._stopped.set()
        if not alarmed and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + 5.0)
        if first and not alarmed:
            peer, unheard_s = max(self.liveness.longest_s.items(), key=lambda item: item[1])
            log.info(
                "the longest a peer went unheard was %.1f s (rank %d); the liveness timeout is %g s",
                unheard_s,
                peer,
                self.timeout_s,
            )

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.beat()
                self.listen()
            except MPI.Exception as exc:  # a peer MPI found gone: the main thread's exchanges hear it too
                if not self._failed:
                    self._failed = " ".join(str(exc.Get_error_string()).split())
                    log.debug("a heartbeat failed: %s", self._failed)
            if self._alarm(self.liveness.silence(time.monotonic())):
                return
            self._stopped.wait(self.interval_s)

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval_s):
            silence = self.liveness.silence(time.monotonic())
            if silence is not None and silence.longest_s > WATCHDOG_FACTOR * self.timeout_s:
                log.debug("the heartbeat thread did not raise the alarm: the watchdog does")
                self._alarm(silence)
                return

    def _alarm(self, silence: Silence | None) -> bool:
        """Call ``on_silence`` once, from whichever thread finds the silence first; whether
        this thread is done (the alarm is raised, or the heartbeats are stopping)."""
        if silence is None:
            return False
        with self._lock:
            if self._stopping or self._alarmed:
                return True
            self._alarmed = True
        self.on_silence(silence)
        return True

    def beat(self) -> None:
        """Send each peer this rank's heartbeat, without waiting: one to a stopped peer stays
        queued (a few small messages until the timeout passes)."""
        self._sending = [r for r in self._sending if not r.Test()]
        heartbeat = (time.time(), self._host)
        for peer in self.peers:
            self._sending.append(self.comm.isend(heartbeat, dest=peer, tag=_HEARTBEAT_TAG))

    def listen(self) -> int:
        """Take in every heartbeat that has arrived, before the silence is judged; how many.
        Probes until ``quiet_probes`` in a row find none: one empty probe is no proof that none
        has arrived (the module's docstring says why)."""
        status = MPI.Status()
        source = MPI.ANY_SOURCE if self.comm.rank == 0 else 0
        taken = quiet = 0
        while quiet < self.quiet_probes:
            message = self.comm.improbe(source, _HEARTBEAT_TAG, status)
            if message is None:
                quiet += 1
                continue
            _, host = message.recv()
            self.liveness.heard(status.Get_source(), time.monotonic(), host)
            taken, quiet = taken + 1, 0
        return taken
