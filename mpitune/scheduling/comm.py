"""The MPI transport: collectives, the shared clock, broadcasting the problem.

Only this module and the loop (loop.py, which hands the MPI module to the command line) import mpi4py.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
from mpi4py import MPI

from mpitune.model.problem import Problem
from mpitune.model.timeline import Clock

T = TypeVar("T")

_CLOCK_TAG = 7
_CLOCK_ROUNDS = 5


def start_clock(comm: MPI.Comm, simulated: bool = False) -> tuple[Clock, float]:
    """One clock for every rank's timeline, and the run's start in Unix time.

    Each rank counts with its own monotonic clock from a barrier, then corrects for when it
    left the barrier (an oversubscribed node can deschedule a rank for milliseconds) by a
    few ping-pongs with rank 0, keeping the offset measured with the shortest round trip:
    its error is at most half that round trip, microseconds on one node.
    """
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
    return clock, comm.bcast(time.time(), root=0)


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


def bcast_problem(comm: MPI.Comm, problem: Problem | None, indices: np.ndarray | None) -> tuple[Problem, np.ndarray]:
    """Send the problem (without restrictions) and the search space's index table once.

    Arrays travel as buffers; the rest is small and pickled.
    """
    arrays: list[np.ndarray] = []
    skeleton = None
    if comm.rank == 0:
        assert problem is not None and indices is not None, "rank 0 holds the problem"

        def ref(a):
            if isinstance(a, np.ndarray):
                arrays.append(a)
                return _ArrayRef(len(arrays) - 1)
            return a

        slim = problem.for_workers()
        skeleton = replace(
            slim,
            arguments=[ref(a) for a in slim.arguments],
            answer=None if slim.answer is None else [ref(a) for a in slim.answer],
        )
        arrays.append(indices)
    skeleton = comm.bcast(skeleton, root=0)
    arrays = bcast_arrays(comm, arrays if comm.rank == 0 else None)

    def deref(a):
        return arrays[a.index] if isinstance(a, _ArrayRef) else a

    problem = replace(
        skeleton,
        arguments=[deref(a) for a in skeleton.arguments],
        answer=None if skeleton.answer is None else [deref(a) for a in skeleton.answer],
    )
    return problem, arrays[-1]


def slurm_world_error(comm: MPI.Comm) -> str | None:
    """srun with an --mpi plugin that does not match the MPI library starts every task as
    its own world of one rank: N copies would each tune everything. Refuse that."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if comm.size == 1 and tasks.isdigit() and int(tasks) > 1:
        return (
            f"srun started {tasks} tasks but MPI sees a world of 1 rank in each: srun's --mpi plugin "
            f"does not match the MPI library ({MPI.Get_library_version().splitlines()[0].strip()}); "
            f"use --mpi=pmix for Open MPI, --mpi=pmi2 for MPICH, or mpirun inside the allocation"
        )
    return None


class MpiTransport:
    """The ranks of an MPI communicator (COMM_WORLD in a run); see transport.Transport."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # collective: every rank constructs one
        self.node_rank, self.node_size = node.rank, node.size
        node.Free()

    def bcast(self, value: T | None) -> T:
        return self.comm.bcast(value, root=0)

    def scatter(self, values: Sequence[T] | None) -> T:
        return self.comm.scatter(values, root=0)

    def gather(self, value: T) -> list[T] | None:
        return self.comm.gather(value, root=0)

    def allgather(self, value: T) -> list[T]:
        return self.comm.allgather(value)

    def start_clock(self, simulated: bool = False) -> tuple[Clock, float]:
        return start_clock(self.comm, simulated)

    def bcast_problem(self, problem: Problem | None, indices: np.ndarray | None) -> tuple[Problem, np.ndarray]:
        return bcast_problem(self.comm, problem, indices)

    def world_error(self) -> str | None:
        return slurm_world_error(self.comm)
