"""Heartbeats on a node with every core busy (issue 31): only a silent rank may be named, and a
healthy job is never ended at the default liveness timeout.

A CPU hog on every core (each ends by itself after ``HOG_S``, and the fixture kills them all)
beside real mpiexec jobs. Rank 0's main thread makes no MPI call while it measures its own
chunk, and then only its heartbeat thread takes the workers' beats in: it took in one beat per
look, so with several workers a live one went unheard past the timeout. Prints its figures
(``-rP``): docs/reliability.md, "Heartbeats".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import REPO, mpirun, mpitune, recorded_ids, write_scale_spec

from mpitune.scheduling.faults.liveness import DEFAULT_TIMEOUT_S
from mpitune.spec.settings_table import LIVENESS_TIMEOUT

HOG_S = 120.0
CORES = os.cpu_count() or 1
RUNS = 3
RANKS = 3
CONFIGS = 6
# A configuration takes 4 launches of 0.3 s (the verify launch and 3 timed): rank 0 measures its
# chunk of 2 for 2.4 s without an MPI call, more than a heartbeat interval at the default timeout.
SLEEPY_C = r"""
#include <unistd.h>
void scale(float *y, const float *x, int n)
{
    usleep(300000);
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""
UNHEARD = re.compile(r"rank (\d+) INFO \S+heartbeat: the longest a peer went unheard was ([\d.]+) s")


@pytest.fixture
def busy_cores() -> Iterator[int]:
    """A process spinning on every core for the test's length; never left behind."""
    spin = f"import time\nend = time.monotonic() + {HOG_S}\nwhile time.monotonic() < end:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(CORES)]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_only_the_stopped_rank_is_named_while_rank_0_makes_no_mpi_call(busy_cores, tmp_path):
    """Seven ranks, a 3 s timeout (a beat every 0.6 s), rank 1 falls silent: one alarm, in time,
    naming rank 1 alone. Taking in one beat per look, rank 0 heard each of six workers every
    3.6 s at best, and named a live one (rank 4, 2.1 s after rank 1 stopped)."""
    timeout_s = 3.0
    ran = mpirun(7, [str(REPO / "tests" / "data" / "heartbeat_rank0_away.py"), str(timeout_s)], tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    alarms = json.loads(ran.stdout.strip().splitlines()[-1])
    print(f"{busy_cores} hogs; alarms (seconds after rank 1 fell silent, ranks named): {alarms}")
    assert [ranks for _, ranks in alarms] == [[1]], alarms
    assert alarms[0][0] < timeout_s + 2, alarms


def test_a_node_with_every_core_busy_ends_no_job_at_the_default_liveness_timeout(busy_cores, tmp_path, monkeypatch):
    """A few whole runs, a compile worker per core beside the hogs: each ends cleanly, and no
    rank went unheard for half the default timeout."""
    monkeypatch.delenv(LIVENESS_TIMEOUT.variable.name, raising=False)
    params = f'{{"STEP": list(range(1, {CONFIGS + 1})), "MODE": [0]}}'
    # Every launch timed, and nothing measured again after the search: the runs stay short.
    spec = write_scale_spec(tmp_path, params, extra="racing = False\nconfirm = False\ncalibrate = False\n")
    (tmp_path / "scale.c").write_text(SLEEPY_C)
    workers = -(-CORES // RANKS)
    longest_s: list[float] = []
    for run in range(RUNS):
        out = tmp_path / f"run{run}.h5"
        started = time.monotonic()
        args = [str(spec), "--out", str(out), "--batch-size", str(CONFIGS), "--compile-workers", str(workers), "-v"]
        ran = mpitune(RANKS, args, tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert "sent no heartbeat" not in ran.stderr and "did not answer" not in ran.stderr, ran.stderr
        assert sorted(recorded_ids(out)) == list(range(CONFIGS))
        unheard = {int(rank): float(seconds) for rank, seconds in UNHEARD.findall(ran.stderr)}
        assert sorted(unheard) == list(range(RANKS)), ran.stderr
        assert max(unheard.values()) < DEFAULT_TIMEOUT_S / 2, unheard
        longest_s.append(max(unheard.values()))
        print(f"run {run}: {time.monotonic() - started:.1f} s, the longest a peer went unheard by rank: {unheard}")
    print(
        f"{busy_cores} hogs, {workers} compile worker(s) a rank: {RUNS} runs, no false end; longest unheard "
        f"{max(longest_s):.1f} s against the default timeout of {DEFAULT_TIMEOUT_S:g} s"
    )
