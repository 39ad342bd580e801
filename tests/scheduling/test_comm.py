"""The MPI layer, run by pytest-mpi under ``mpiexec -n 2 python -m pytest --with-mpi``.

Without ``--with-mpi`` pytest-mpi skips these; tests/test_mpi_suite.py starts them for real.
"""

import numpy as np
import pytest

from mpitune.model.problem import Kernel, Problem
from mpitune.model.restrictions import Restriction


@pytest.mark.mpi(min_size=2)
def test_bcast_problem_sends_arrays_and_drops_restrictions():
    from mpi4py import MPI

    from mpitune.scheduling.comm import bcast_problem

    comm = MPI.COMM_WORLD
    problem = None
    if comm.rank == 0:
        x = np.arange(10, dtype=np.float32)
        kernel = Kernel(
            spec_path="s.py",
            kernel_name="k",
            kernel_source="src",
            lang="C",
            problem_size=(10,),
            arguments=[x, np.int32(10)],
            answer=[2 * x, None],
            atol=1e-6,
            tune_params={"a": [1, 2]},
        )
        problem = Problem(kernel, restrictions=(Restriction("a > 1", ["a"]), lambda c: True))
    got = bcast_problem(comm, problem)
    assert isinstance(got, Kernel)  # the restrictions, callables among them, stay on rank 0
    assert np.array_equal(got.arguments[0], np.arange(10, dtype=np.float32))
    assert got.arguments[1] == np.int32(10) and got.arguments[1].dtype == np.int32
    assert np.array_equal(got.answer[0], 2 * np.arange(10, dtype=np.float32)) and got.answer[1] is None


@pytest.mark.mpi(min_size=2)
def test_first_error_reaches_every_rank():
    from mpi4py import MPI

    from mpitune.scheduling.comm import MpiTransport
    from mpitune.scheduling.transport import first_error

    transport = MpiTransport(MPI.COMM_WORLD)
    assert transport.size == MPI.COMM_WORLD.size and transport.node_size == transport.size  # one node
    assert first_error(transport, None) is None
    err = first_error(transport, "broken GPU" if transport.rank == 1 else None)
    assert err == "rank 1: broken GPU"


@pytest.mark.mpi(min_size=2)
def test_run_clock_agrees_across_ranks():
    import time

    from mpi4py import MPI

    from mpitune.scheduling.comm import start_clock

    comm = MPI.COMM_WORLD
    clock, started_unix = start_clock(comm)
    comm.Barrier()
    readings = comm.allgather(clock.now())
    assert max(readings) - min(readings) < 0.05
    assert len(set(comm.allgather(started_unix))) == 1
    assert abs(started_unix - time.time()) < 60


@pytest.mark.mpi(min_size=2)
def test_gather_names_the_ranks_past_its_deadline_and_their_reports_still_arrive():
    import time

    from mpi4py import MPI

    from mpitune.scheduling.comm import MpiTransport
    from mpitune.scheduling.transport import SilentRanks

    transport = MpiTransport(MPI.COMM_WORLD)
    rank, size = transport.rank, transport.size
    if rank == 0:
        with pytest.raises(SilentRanks) as silent:
            transport.gather("zero", deadline_s=0.2)
        assert silent.value.ranks == tuple(range(1, size))
        assert silent.value.hosts == transport.hosts[1:] and all(silent.value.hosts)
        assert silent.value.received == {0: "zero"} and 0.2 <= silent.value.waited_s < 1.0
        # What came late is not lost: the next look takes it, in rank order.
        assert transport.gather("zero", deadline_s=10) == ["zero", *[("late", r) for r in range(1, size)]]
    else:
        time.sleep(1.0)
        assert transport.gather(("late", rank), deadline_s=10) is None
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_report_that_arrives_before_its_gather_waits_for_it_in_order():
    from mpi4py import MPI

    from mpitune.scheduling.comm import MpiTransport

    transport = MpiTransport(MPI.COMM_WORLD)
    rank, size = transport.rank, transport.size
    if rank == 0:
        # Two orders out before any report is in, as with two batches in flight.
        assert transport.scatter([("a", r) for r in range(size)]) == ("a", 0)
        assert transport.scatter([("b", r) for r in range(size)]) == ("b", 0)
        MPI.COMM_WORLD.Barrier()  # every worker has sent both its reports
        assert transport.gather("first", deadline_s=10) == ["first", *[("a", r) for r in range(1, size)]]
        assert transport.gather("second", deadline_s=10) == ["second", *[("b", r) for r in range(1, size)]]
    else:
        for _ in range(2):
            transport.gather(transport.scatter(None, deadline_s=10), deadline_s=10)
        MPI.COMM_WORLD.Barrier()
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_worker_names_rank_0_when_no_order_comes_in_time():
    import time

    from mpi4py import MPI

    from mpitune.scheduling.comm import MpiTransport
    from mpitune.scheduling.transport import SilentRanks

    transport = MpiTransport(MPI.COMM_WORLD)
    rank, size = transport.rank, transport.size
    if rank == 0:
        time.sleep(1.0)
        assert transport.scatter([("order", r) for r in range(size)]) == ("order", 0)
    else:
        with pytest.raises(SilentRanks) as silent:
            transport.scatter(None, deadline_s=0.2)
        assert silent.value.ranks == (0,) and silent.value.hosts == (transport.hosts[0],)
        assert transport.scatter(None, deadline_s=10) == ("order", rank)
    assert transport.gather(rank, deadline_s=10) == (list(range(size)) if rank == 0 else None)


@pytest.mark.mpi(min_size=2)
def test_a_gather_ends_when_the_heartbeats_find_a_worker_silent():
    """Real heartbeat threads with a 1 s timeout; the workers' stop beating, and rank 0's gather,
    whose deadline is 30 s, ends within seconds naming them."""
    import time

    from mpi4py import MPI

    from mpitune.scheduling.comm import MpiTransport
    from mpitune.scheduling.faults.heartbeat import Heartbeat
    from mpitune.scheduling.faults.liveness import Silence, Watch
    from mpitune.scheduling.transport import SilentRanks

    comm = MPI.COMM_WORLD
    watch = Watch()
    alarms: list[Silence] = []

    def alarm(silence: Silence) -> None:
        alarms.append(silence)
        watch.silence = silence

    # Silence counts from the heartbeat's start: a worker's last beat may come before the gather.
    started = time.monotonic()
    heartbeat = Heartbeat.start(comm, 1.0, alarm)
    assert heartbeat is not None and MPI.Query_thread() == MPI.THREAD_MULTIPLE
    transport = MpiTransport(comm, watch)
    heartbeat.know_hosts(transport.hosts)
    if transport.rank != 0:
        heartbeat.stop()  # this rank falls silent
    else:
        with pytest.raises(SilentRanks) as silent:
            transport.gather("zero", deadline_s=30)
        assert 1.0 < time.monotonic() - started < 10
        assert silent.value.heartbeat is alarms[0] and silent.value.ranks == tuple(range(1, transport.size))
        assert silent.value.hosts == transport.hosts[1:]
        assert watch.ending and not watch.polling
        heartbeat.stop()
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_one_look_takes_in_every_heartbeat_that_has_arrived(tmp_path):
    """MPICH moves one message into the queue a probe searches per probe that finds nothing, so a
    look that stopped at its first empty probe took in one of the 20 beats each worker had sent
    (issue 31). The heartbeat threads are not started: the workers beat, and rank 0, which makes
    no MPI call meanwhile (a file tells it the beats are out), looks once."""
    import time
    from pathlib import Path

    from mpi4py import MPI

    from mpitune.scheduling.faults.heartbeat import Heartbeat

    comm = MPI.COMM_WORLD
    heartbeat = Heartbeat(comm.Dup(), 20.0, print)
    folder = Path(comm.bcast(str(tmp_path), root=0))
    if comm.rank:
        for _ in range(20):
            heartbeat.beat()
        (folder / f"sent-{comm.rank}").touch()
    else:
        until = time.monotonic() + 60
        while len(list(folder.glob("sent-*"))) < comm.size - 1 and time.monotonic() < until:
            time.sleep(0.01)
        looked_s = time.monotonic()
        taken = heartbeat.listen()
    comm.Barrier()  # before rank 0 asserts: a failure must not leave the workers in a collective
    if comm.rank == 0:
        assert taken == 20 * (comm.size - 1)
        assert all(heard >= looked_s for heard in heartbeat.liveness.heard_s.values())


@pytest.mark.mpi(min_size=2)
def test_workers_leave_only_once_rank_0_has_closed_the_file_and_at_most_a_bound_later_without_it(monkeypatch):
    import time

    from mpi4py import MPI

    from mpitune.scheduling import transport as transport_module
    from mpitune.scheduling.comm import MpiTransport

    transport = MpiTransport(MPI.COMM_WORLD)
    # Rank 0 takes 1.5 s to close its file; a worker waits for it.
    MPI.COMM_WORLD.Barrier()
    started_s = time.monotonic()
    if transport.rank == 0:
        time.sleep(1.5)
    transport_module.leave_together(transport)
    if transport.rank:
        assert time.monotonic() - started_s >= 1.4
    # A rank 0 that never says so holds a worker CLOSE_WAIT_S at most.
    monkeypatch.setattr(transport_module, "CLOSE_WAIT_S", 0.5)
    MPI.COMM_WORLD.Barrier()
    started_s = time.monotonic()
    if transport.rank:
        transport_module.leave_together(transport)
        assert 0.4 <= time.monotonic() - started_s < 5.0
    MPI.COMM_WORLD.Barrier()
