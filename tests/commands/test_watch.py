"""watch and report on a file while its run goes on (HDF5 SWMR), with a real mpiexec job."""

import json
import subprocess
import sys
import time

import pytest
from conftest import mpi_env, start_mpitune, wait_for_batch, write_scale_spec

from mpitune.cli import main


def test_watch_and_report_follow_a_running_job_to_its_end(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 401)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    job = start_mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    wait_for_batch(job, 2)
    report = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(cache), "--json"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert 0 < json.loads(report.stdout)["configs"] < 400  # read mid-run
    plots = subprocess.run(
        [sys.executable, "-m", "mpitune", "plot", str(cache), "--out", str(tmp_path / "plots")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plots.returncode == 0, plots.stderr
    assert {p.name for p in (tmp_path / "plots").glob("*.png")} >= {"timeline.png", "convergence.png"}
    watch = subprocess.run(
        [sys.executable, "-m", "mpitune", "watch", str(cache), "--interval", "0.5"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    job.communicate(timeout=120)
    assert job.returncode == 0
    assert watch.returncode == 0, watch.stderr
    lines = watch.stdout.splitlines()
    assert "(running)" in lines[0] and "(finished)" in lines[-1] and "400/400 recorded" in lines[-1]


def test_watch_says_when_the_writer_was_killed(tmp_path):
    import os
    import signal

    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 81)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    job = start_mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    wait_for_batch(job, 2)
    os.killpg(job.pid, signal.SIGKILL)
    job.communicate(timeout=30)
    time.sleep(0.2)
    watch = subprocess.run(
        [sys.executable, "-m", "mpitune", "watch", str(cache), "--interval", "0.2"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watch.returncode == 1 and "the run was killed" in watch.stdout


def test_a_port_or_interval_out_of_range_is_one_line(tmp_path, capsys):
    """The file need not exist: the flags are refused before anything is read or bound."""
    watch = subprocess.run(  # gave a traceback
        [sys.executable, "-m", "mpitune", "watch", str(tmp_path / "out.h5"), "--html", "--port", "70000"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watch.returncode == 2 and watch.stderr.count("\n") == 1, watch.stderr
    assert "argument --port: must be a port number from 0 to 65535, got '70000'" in watch.stderr
    for flags, says in [  # the same command line, in process
        (["--html", "--port", "-1"], "argument --port: must be a port number from 0 to 65535, got '-1'"),
        (["--interval", "nan"], "argument --interval: not a finite number: 'nan'"),
        (["--html", "--interval", "0"], "argument --interval: must be greater than 0, got '0'"),
    ]:
        with pytest.raises(SystemExit) as ended:
            main(["watch", str(tmp_path / "out.h5"), *flags])
        err = capsys.readouterr().err
        assert ended.value.code == 2 and err.count("\n") == 1 and says in err, err
