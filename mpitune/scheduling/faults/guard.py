"""A rank's watch on its peers, from MPI's start to the run's end: every rank's heartbeat, and on
rank 0 the ``Watch`` its main thread shares with the heartbeat thread, armed once the file is
open so that the heartbeat thread can close it for a silent rank (ending.py says who ends the
job, and how)."""

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
    """A rank's liveness watch, started with MPI: on rank 0 before its spec is loaded, where
    that happens beside MPI's start (before_mpi.py, ``load_while``), so that a rank lost meanwhile ends
    the job as it would later."""

    watch: Watch
    heartbeat: Heartbeat | None


def guard(liveness_timeout_s: float | None = None) -> Guard:
    """Start this rank's heartbeat on COMM_WORLD (heartbeat.py; ``liveness_timeout_s``: None for
    the environment's or the default, 0 for none). Collective."""
    comm = MPI.COMM_WORLD
    watch = Watch()
    beat = Heartbeat.start(comm, timeout_s(liveness_timeout_s), on_rank0(watch) if comm.rank == 0 else on_worker)
    return Guard(watch, beat)


def arm(watch: Watch, manager: Manager, timeline: Timeline) -> None:
    """Give rank 0's heartbeat thread the file, once it is open (with ``watch.writing`` held).
    The thread closes it, with ``watch.writing`` held, to end a run the main thread cannot end
    (it is measuring): the run is marked ``silent_rank`` and the file closed, its lock released.
    What is in flight stays recorded as in flight (``check`` names it, a rerun measures it); no
    search end is recorded, so the next run starts its strategy as after a killed run."""

    def close() -> None:
        manager.stop_for_silence()
        manager.cache.finish_run(timeline.clock.now(), StopReason.SILENT_RANK.value, manager.measured)
        manager.cache.close()
        if manager.cache.lost is not None:  # the rows are beside the path: the line says where
            raise manager.cache.lost

    watch.path, watch.close = manager.cache.path, close
