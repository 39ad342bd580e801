"""Fails on rank 1 only. Not collected by the suite; tests/test_mpi_suite.py runs it on purpose
to prove that a failure on a rank other than 0 fails the run."""

import pytest


@pytest.mark.mpi(min_size=2)
def test_fails_on_rank_one():
    from mpi4py import MPI

    assert MPI.COMM_WORLD.rank != 1
