import os
import signal
import subprocess
import sys

import pytest
from conftest import mpi_env

from mpitune.cli import main
from mpitune.cli.job import CANCELLED_ABOVE_S, seconds_left, srun_mpi_plugin, stop_cause
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


def stand_ins(tmp_path, squeue: str) -> dict:
    """srun that records its arguments and ends 0, and squeue that runs ``squeue`` (a shell
    line), on PATH; the environment of a job 4242 with them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "srun.log"}\n')
    (bin_dir / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return mpi_env() | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}


def job(tmp_path, env: dict, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpitune", "job", "--srun-mpi", "pmi2", *flags, "spec.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "variable,value,says",
    [
        ("MPITUNE_SRUN_WAIT_S", "5s", "not a number: '5s'"),
        ("MPITUNE_MARGIN_S", "nan", "not a finite number: 'nan'"),
        ("MPITUNE_LAUNCHER", "ssh", "must be one of srun, mpirun, got 'ssh'"),
        ("MPITUNE_REQUEUE", "yes", "must be 1 (requeue) or 0 (do not), got 'yes'"),
        ("SLURM_NTASKS", "0", "must be a whole number above 0, got '0'"),
        ("SLURM_NTASKS", "-1", "must be a whole number above 0, got '-1'"),
        ("SLURM_NTASKS", "four", "must be a whole number above 0, got 'four'"),
        ("SLURM_CPUS_PER_TASK", "0", "must be a whole number above 0, got '0'"),
        ("SLURM_JOB_ID", "42;rm", "must be a whole number above 0, got '42;rm'"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it_and_nothing_starts(tmp_path, monkeypatch, capsys, variable, value, says):
    """In process, through the command line's main (nothing is started: no signal handler is set)."""
    for name in ("SLURM_NTASKS", "SLURM_CPUS_PER_TASK", *[v for v in os.environ if v.startswith("MPITUNE_")]):
        monkeypatch.delenv(name, raising=False)
    for name, text in stand_ins(tmp_path, "echo 10:00").items():
        monkeypatch.setenv(name, text)
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    assert main(["job", "--srun-mpi", "pmi2", "spec.py"]) == ExitCode.USER_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err == f"mpitune: error: environment variable {variable}: {says}\n"
    assert not (tmp_path / "srun.log").exists()


def test_a_malformed_srun_wait_is_one_line_from_the_command_line(tmp_path):
    proc = job(tmp_path, stand_ins(tmp_path, "echo 10:00") | {"MPITUNE_SRUN_WAIT_S": "5s"})  # was a traceback
    assert proc.returncode == ExitCode.USER_ERROR and not (tmp_path / "srun.log").exists()
    assert proc.stderr == "mpitune: error: environment variable MPITUNE_SRUN_WAIT_S: not a number: '5s'\n"


def test_help_needs_no_environment_variable(tmp_path):
    env = mpi_env() | {"MPITUNE_SRUN_WAIT_S": "5s", "MPITUNE_LAUNCHER": "ssh", "MPITUNE_MARGIN_S": "x"}
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "job", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "--srun-wait S" in proc.stdout and proc.stderr == ""


def test_the_margin_sets_the_time_limit_from_squeue(tmp_path):
    proc = job(tmp_path, stand_ins(tmp_path, "echo 10:00"), "--margin", "60", "--srun-wait", "2.5")
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stderr
    srun = (tmp_path / "srun.log").read_text()
    assert "--wait=3 " in srun and srun.rstrip().endswith("--time-limit 540")  # 10 min less the margin


@pytest.mark.parametrize(
    "squeue,why",
    [
        ("exit 1", "squeue could not tell the job's time left, so its end time is unknown"),
        ("echo UNLIMITED", "the job has no time limit (squeue: UNLIMITED)"),
        ("echo 0:30", "the job has only 30 s left"),
    ],
)
def test_a_margin_that_cannot_be_applied_is_a_warning_and_the_run_goes_on(tmp_path, squeue, why):
    proc = job(tmp_path, stand_ins(tmp_path, squeue) | {"MPITUNE_MARGIN_S": "60"})
    assert proc.returncode == 0, proc.stderr
    assert f"WARNING mpitune.cli.job: --margin 60 s cannot be applied: {why}" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "--time-limit" not in (tmp_path / "srun.log").read_text()


@pytest.mark.parametrize("het_size,het_group", [("3", " --het-group=0-2 "), ("", None)])
def test_a_heterogeneous_job_starts_every_component_as_one_world(tmp_path, het_size, het_group):
    """sbatch ... : ... runs the script in the first component; srun must be told every one."""
    proc = job(tmp_path, stand_ins(tmp_path, "echo 10:00") | {"SLURM_HET_SIZE": het_size})
    assert proc.returncode == 0, proc.stderr
    srun = (tmp_path / "srun.log").read_text()
    assert (het_group in srun) if het_group else "--het-group" not in srun


def test_a_heterogeneous_job_under_mpirun_is_refused_in_one_line(tmp_path):
    proc = job(tmp_path, stand_ins(tmp_path, "echo 10:00") | {"SLURM_HET_SIZE": "2"}, "--launcher", "mpirun")
    assert proc.returncode == ExitCode.USER_ERROR
    assert proc.stderr == (
        "mpitune: error: this is a heterogeneous job of 2 components, which only srun starts as one MPI job; "
        "unset MPITUNE_LAUNCHER or set it to srun\n"
    )
    assert not (tmp_path / "srun.log").exists()
