"""A spec loaded on rank 0 while MPI starts beside it, before the run's clock exists.

MPI's start (mpi4py's import initialises it, with numpy and h5py before it: about 0.9 s on one
NVIDIA H200's host, 16 cores) and the spec's own code (the examples' matmul computes a
4096 x 4096 reference: 0.7 s) need nothing of each other, and the spec's heavy part is numpy,
which leaves the interpreter free while it computes. One thing does not overlap: MPI_Init
holds the interpreter while it waits for the other ranks to start it too, so the spec pauses
for as long as the slowest rank is behind rank 0 (no longer than it waited before).

So, when the launcher says that this process is rank 0, the command line loads the spec in
the main thread (where its load deadline's alarm is delivered) while another thread starts MPI
and this rank's heartbeat. The loop then takes what the spec gave, or raises what it raised,
as if it had loaded it itself, and the run's clock begins when the spec's loading did, on
every rank (comm.start_clock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from mpitune.model.problem import Problem, RunSettings

T = TypeVar("T")


@dataclass(frozen=True)
class Preloaded:
    """What loading the spec gave (or raised), and when: ``time.perf_counter()`` values."""

    started: float
    ended: float
    loaded: tuple[Problem, RunSettings] | None
    error: BaseException | None

    @classmethod
    def run(cls, load: Callable[[], tuple[Problem, RunSettings]]) -> Preloaded:
        """Call ``load`` now, keeping whatever it raises (a user's error, an interrupt) for the
        loop to meet where it would have called ``load`` itself."""
        started = time.perf_counter()
        try:
            loaded = load()
        except BaseException as exc:  # re-raised by __call__, in the loop
            return cls(started, time.perf_counter(), None, exc)
        return cls(started, time.perf_counter(), loaded, None)

    def __call__(self) -> tuple[Problem, RunSettings]:
        if self.error is not None:
            raise self.error
        assert self.loaded is not None
        return self.loaded


def load_while(start: Callable[[], T], load: Callable[[], tuple[Problem, RunSettings]]) -> tuple[T, Preloaded]:
    """``start()`` (MPI's start) in a thread while ``load()`` runs in this one; both results,
    once both are done. What ``start`` raises is raised here; what ``load`` raises waits in the
    record for the loop."""
    started: list[T] = []
    failed: list[BaseException] = []

    def run_start() -> None:
        try:
            started.append(start())
        except BaseException as exc:  # raised below, in the calling thread
            failed.append(exc)

    thread = threading.Thread(target=run_start, name="mpitune-mpi-start", daemon=True)
    thread.start()
    try:
        preloaded = Preloaded.run(load)
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return started[0], preloaded
