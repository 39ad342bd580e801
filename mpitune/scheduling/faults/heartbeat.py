"""Every rank's heartbeat thread: a tiny message to its peers every few seconds, and the alarm when
a peer sent none for the liveness timeout (liveness.py says why and how long).

A thread, because the main thread is often busy for long; its blocking MPI calls and sleeps release
the GIL. Workers beat to rank 0 and rank 0 to every worker, on a duplicate of COMM_WORLD. There no
beat is taken for a round's message, and none left unreceived troubles COMM_WORLD: MPICH 5.0's
``MPI_Finalize`` failed on such unmatched messages. A beat carries its host's name, to name a silent
peer's host before the start-up exchange.

Each look takes in every beat that arrived, probing until several in a row find none. MPICH moves at
most one message into the probed queue per empty probe, and beats left unread had a live rank named
silent (docs/reliability.md, "Heartbeats").

A second thread, the watchdog, makes no MPI call. It raises the alarm once a peer has been silent
for ``WATCHDOG_FACTOR`` timeouts: when a peer's node vanishes, MPI's TCP transport can hold every
thread that calls into MPI for minutes.
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
    """This rank's heartbeat thread on ``comm``, a communicator of its own. ``on_silence`` is called
    once, in the thread, when a peer was silent longer than ``timeout_s``; it should end the job."""

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
        """The running heartbeat of this rank, on a duplicate of ``comm``.

        None for a world of one rank, a timeout of 0 (off), or a library below
        ``MPI_THREAD_MULTIPLE`` (``thread_level``, else ``MPI.Query_thread()``). Then the per-batch
        deadline alone catches a silent rank. Collective, unless it returns None on every rank. The
        duplicate is never freed, which MPI_Finalize allows."""
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
        """No more heartbeats, sent or expected: the run ends cleanly, and the ranks leave at
        different moments. Waits for the thread unless it is raising its alarm."""
        with self._lock:
            first, self._stopping = not self._stopping, True
            alarmed = self._alarmed
        self._stopped.set()
        if not alarmed:  # both threads end before the process does (``_join``)
            self._join(self._thread, self.interval_s + 5.0)
            self._join(self._watchdog, 5.0)
        if first and not alarmed:
            peer, unheard_s = max(self.liveness.longest_s.items(), key=lambda item: item[1])
            log.info(
                "the longest a peer went unheard was %.1f s (rank %d); the liveness timeout is %g s",
                unheard_s,
                peer,
                self.timeout_s,
            )

    @staticmethod
    def _join(thread: threading.Thread, timeout_s: float) -> None:
        """Wait for ``thread`` to end, unless it is this one. A daemon thread still running when the
        interpreter finalises is frozen where it stands: one freeing h5py objects (garbage collection
        runs in any thread) would keep h5py's lock, and the main thread, freeing h5py's own objects
        at exit, would wait for it for ever."""
        if thread is not threading.current_thread() and thread.ident is not None:
            thread.join(timeout=timeout_s)

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
        """Call ``on_silence`` once, from whichever thread finds the silence first. Returns whether
        this thread is done: the alarm is raised, or the heartbeats are stopping."""
        if silence is None:
            return False
        with self._lock:
            if self._stopping or self._alarmed:
                return True
            self._alarmed = True
        self.on_silence(silence)
        return True

    def beat(self) -> None:
        """Send each peer this rank's heartbeat, without waiting. One to a stopped peer stays
        queued: a few small messages until the timeout passes."""
        self._sending = [r for r in self._sending if not r.Test()]
        heartbeat = (time.time(), self._host)
        for peer in self.peers:
            self._sending.append(self.comm.isend(heartbeat, dest=peer, tag=_HEARTBEAT_TAG))

    def listen(self) -> int:
        """Take in every heartbeat that has arrived, before the silence is judged; returns how many.
        It probes until ``quiet_probes`` in a row find none: one empty probe proves nothing (see the
        module's docstring)."""
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
