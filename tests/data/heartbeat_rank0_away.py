"""Real heartbeats on every rank of a job while rank 0's main thread makes no MPI call (as while it
measures its own chunk) and rank 1 falls silent (its heartbeat stops) ``STOP_S`` in; rank 0
prints, as JSON, every alarm its heartbeat raised: the seconds since rank 1 fell silent, and the
ranks named. Not collected by the suite; tests/reliability/test_heartbeat_load.py runs it.

Usage: mpiexec -n N python heartbeat_rank0_away.py TIMEOUT_S
"""

import json
import sys
import time

from mpi4py import MPI

from mpitune.scheduling.faults.heartbeat import Heartbeat
from mpitune.scheduling.faults.liveness import Silence

STOP_S = 1.0
timeout_s = float(sys.argv[1])
comm = MPI.COMM_WORLD
started = time.monotonic()
alarms: list[tuple[float, list[int]]] = []


def alarm(silence: Silence) -> None:
    alarms.append((round(time.monotonic() - started - STOP_S, 2), list(silence.ranks)))


heartbeat = Heartbeat.start(comm, timeout_s, alarm)
assert heartbeat is not None, "the heartbeats need MPI_THREAD_MULTIPLE"
if comm.rank == 1:
    time.sleep(STOP_S)
    heartbeat.stop()
time.sleep(STOP_S + timeout_s + 2.0)  # rank 0: the alarm comes by then, if it comes in time
if comm.rank == 0:
    print(json.dumps(alarms), flush=True)
heartbeat.stop()
comm.Barrier()
