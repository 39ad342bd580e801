"""A rank's watch on its peers, from MPI's start to the run's end. Every rank beats; rank 0's main
thread shares a ``Watch`` with its heartbeat thread. Armed once the file is open, that thread can
close the file for a silent rank (ending.py says who ends the job, and how)."""

from __future__ import annotations

from dataclasses import dataclass

from mpitune.model.timeline import Timeline
from mpitune.scheduling.comm import MPI
from mpitune.scheduling.faults.ending import on_rank0, on_worker
from mpitune.scheduling.faults.heartbeat import Heartbeat
from mpitune.scheduling.faults.liveness import Watch, timeout_s
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import StopReason


@dataclass(frozen=True)
class Guard:
    """A rank's liveness watch, started with MPI. On rank 0 that is before its spec is loaded, where
    the load runs beside MPI's start (before_mpi.py, ``load_while``). A rank lost meanwhile then
    ends the job as it would later."""

    watch: Watch
    heartbeat: Heartbeat | None


def guard(liveness_timeout_s: float | None = None) -> Guard:
    """Start this rank's heartbeat on COMM_WORLD (heartbeat.py). ``liveness_timeout_s``: None for
    the environment's or the default, 0 for none. Collective."""
    comm = MPI.COMM_WORLD
    watch = Watch()
    beat = Heartbeat.start(comm, timeout_s(liveness_timeout_s), on_rank0(watch) if comm.rank == 0 else on_worker)
    return Guard(watch, beat)


def arm(watch: Watch, manager: Manager, timeline: Timeline) -> None:
    """Give rank 0's heartbeat thread the file once it is open (``watch.writing`` held). It closes
    it to end a run the main thread cannot end: the run is marked ``silent_rank``, what is in flight
    stays in flight, and no search end is recorded, as after a killed run."""

    def close() -> None:
        manager.stop_for_silence()
        manager.cache.finish_run(timeline.clock.now(), StopReason.SILENT_RANK.value, manager.measured)
        manager.cache.close()
        if manager.cache.lost is not None:  # the rows are beside the path: the line says where
            raise manager.cache.lost

    watch.path, watch.close = manager.cache.path, close
