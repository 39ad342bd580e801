"""How the loop moves data between ranks, without naming MPI.

The loop in production talks MPI (``comm.MpiTransport``); ``LocalTransport`` is a world of one
rank in this process, so that a whole run can be driven without mpiexec.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from mpitune.model.problem import Problem
from mpitune.model.timeline import Clock

T = TypeVar("T")


class Transport(Protocol):
    """Collectives over the ranks of one job, rooted at rank 0; every rank calls each of them
    in the same order, or the job hangs."""

    rank: int
    size: int
    node_rank: int  # this rank's place among the ranks of its node: which device is its own
    node_size: int

    def bcast(self, value: T | None) -> T:
        """Rank 0's ``value`` on every rank."""
        ...

    def scatter(self, values: Sequence[T] | None) -> T:
        """Rank 0's ``values[r]`` on rank r."""
        ...

    def gather(self, value: T) -> list[T] | None:
        """Every rank's ``value`` on rank 0, in rank order; None elsewhere."""
        ...

    def allgather(self, value: T) -> list[T]: ...

    def start_clock(self, simulated: bool = False) -> tuple[Clock, float]:
        """One clock for every rank's timeline, and the run's start in Unix time."""
        ...

    def bcast_problem(self, problem: Problem | None, indices: np.ndarray | None) -> tuple[Problem, np.ndarray]:
        """Rank 0's problem, as workers need it, and the search space's index table."""
        ...

    def world_error(self) -> str | None:
        """Why this world cannot be one tuning job (a launcher that does not match the
        library); None if it can."""
        ...


def first_error(transport: Transport, error: str | None) -> str | None:
    """Collective: every rank learns the first rank's error, so all of them stop together."""
    errors = transport.allgather(error)
    for rank, err in enumerate(errors):
        if err:
            return err if transport.size == 1 or rank == 0 else f"rank {rank}: {err}"
    return None


class LocalTransport:
    """A world of one rank in this process: every collective is a no-op."""

    rank = 0
    size = 1
    node_rank = 0
    node_size = 1

    def bcast(self, value: T | None) -> T:
        return value  # type: ignore[return-value]  # rank 0 is every rank

    def scatter(self, values: Sequence[T] | None) -> T:
        assert values is not None, "rank 0 scatters"
        return values[0]

    def gather(self, value: T) -> list[T] | None:
        return [value]

    def allgather(self, value: T) -> list[T]:
        return [value]

    def start_clock(self, simulated: bool = False) -> tuple[Clock, float]:
        return Clock(simulated), time.time()

    def bcast_problem(self, problem: Problem | None, indices: np.ndarray | None) -> tuple[Problem, np.ndarray]:
        assert problem is not None and indices is not None, "rank 0 holds the problem"
        return problem.for_workers(), indices

    def world_error(self) -> str | None:
        return None
