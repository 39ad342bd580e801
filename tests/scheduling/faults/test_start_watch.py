"""A rank stopped before MPI_Init: the job ends with one line instead of waiting forever. Real
processes throughout: an MPMD job whose second rank stops itself before its Python starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.conftest import mpi_env, mpiexec, write_scale_spec

LINE = "mpitune: error: MPI did not start within 3 s: a rank was stopped or lost before MPI_Init"


def test_a_rank_stopped_before_mpi_init_ends_the_job_with_one_line(tmp_path):
    spec = write_scale_spec(tmp_path)
    tune = [sys.executable, "-m", "mpitune", str(spec), "--out", str(tmp_path / "out.h5"), "--max-fevals", "4"]
    stopped = "kill -STOP $$; exec " + " ".join(tune)  # rank 1 stops before its Python starts
    env = {**mpi_env(), "MPITUNE_MPI_START_TIMEOUT_S": "3"}
    started = time.monotonic()
    job = subprocess.run(
        [*mpiexec(), "-n", "1", *tune, ":", "-n", "1", "sh", "-c", stopped],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert job.returncode != 0
    assert job.stderr.count(LINE) == 1, job.stderr
    assert "Traceback" not in job.stderr
    left = subprocess.run(["pgrep", "-f", "kill -STOP"], capture_output=True, text=True)
    assert str(tmp_path) not in left.stdout  # the stopped rank was ended too


def _watched(limit_s: str, mode: str, wait_s: str) -> subprocess.CompletedProcess:
    """A process that starts the watch as rank 0 and, ``up``, ends it, then waits ``wait_s``."""
    code = textwrap.dedent(
        """
        import sys, time
        from mpitune.scheduling.faults.start_watch import StartWatch
        watch = StartWatch(0, {"MPITUNE_MPI_START_TIMEOUT_S": sys.argv[1]})
        if sys.argv[2] == "up":
            watch.end()
        time.sleep(float(sys.argv[3]))  # as in MPI_Init, unless the watch was ended
        print("alive")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code, limit_s, mode, wait_s], env=mpi_env(), capture_output=True, text=True, timeout=60
    )


def test_an_ended_watch_kills_nothing_and_a_start_that_takes_too_long_is_killed():
    healthy = _watched("1", "up", "3")  # waits past the limit, after the watch was ended
    assert (healthy.returncode, healthy.stdout.strip(), healthy.stderr) == (0, "alive", "")
    started = time.monotonic()
    stuck = _watched("1", "stuck", "30")
    assert stuck.returncode == -9 and stuck.stdout == ""
    assert time.monotonic() - started < 10
    assert stuck.stderr.startswith("mpitune: error: MPI did not start within 1 s"), stuck.stderr
    off = _watched("0", "stuck", "2")  # 0 turns the watch off
    assert (off.returncode, off.stdout.strip()) == (0, "alive")
