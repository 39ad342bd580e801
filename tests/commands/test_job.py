import os
import signal
import subprocess
import sys

import pytest
from conftest import mpi_env

from mpitune.commands.job import CANCELLED_ABOVE_S, seconds_left, srun_mpi_plugin, stop_cause
from mpitune.exits import ExitCode


@pytest.mark.parametrize(
    "text,expected",
    [
        ("14:59", 899),
        ("1:02:03", 3723),
        ("2-00:00:10", 172810),
        ("0:05\n", 5),
        ("UNLIMITED", None),
        ("NOT_SET\n", None),
        ("", None),
    ],
)
def test_squeue_time_left(text, expected):
    assert seconds_left(text) == expected


def test_plugin_follows_the_mpi_library_mpi4py_loads():
    from mpi4py import MPI

    expected = "pmix" if "Open MPI" in MPI.Get_library_version() else "pmi2"
    assert srun_mpi_plugin(sys.executable) == expected


def test_job_without_a_spec_is_refused():
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "job"], env=mpi_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "needs a spec" in proc.stderr


@pytest.mark.parametrize(
    "signum,left_s,cause",
    [
        (signal.SIGUSR1, 90, "limit"),  # the warning asked for with --signal=B:USR1@90
        (signal.SIGUSR1, None, "limit"),
        (signal.SIGTERM, 0, "limit"),  # Slurm's SIGTERM at the time limit
        (signal.SIGTERM, CANCELLED_ABOVE_S, "limit"),  # a --signal=B:TERM@T warning, sent early
        (signal.SIGTERM, CANCELLED_ABOVE_S + 1, "cancelled"),  # scancel with time to spare
        (signal.SIGTERM, None, "cancelled"),  # a job without a limit has none to be near
    ],
)
def test_a_sigterm_with_time_left_is_a_cancel_not_the_limit(signum, left_s, cause):
    assert stop_cause(signum, left_s) == cause


@pytest.mark.parametrize("code", [ExitCode.OK, ExitCode.USER_ERROR, ExitCode.RESUMABLE, ExitCode.INTERRUPTED])
def test_the_job_requeues_only_a_run_that_ended_resumable_and_passes_its_code_on(tmp_path, code):
    """The job scripts exec ``mpitune job``, which reads the run's exit code from the table: a
    stand-in srun ends with ``code``, a stand-in scontrol records what it was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/sh\nexit {code.value}\n")
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = mpi_env() | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "job", "--srun-mpi", "pmi2", "spec.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == code, proc.stdout + proc.stderr
    requeued = (tmp_path / "scontrol.log").read_text() if (tmp_path / "scontrol.log").exists() else ""
    assert requeued == ("requeue 4242\n" if code == ExitCode.RESUMABLE else "")
