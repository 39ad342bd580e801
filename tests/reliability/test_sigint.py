"""Class 6: Ctrl-C. One SIGINT drains the batch in flight like SIGTERM (exit 75, everything
recorded); a second, later one stops at once (exit 130) and keeps every batch recorded before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
from conftest import mpi_env, start_mpitune, wait_for_batch, write_scale_spec

# Each configuration sleeps 0.1 s per launch (verify + 3 iterations): a batch lasts long enough
# to be interrupted in the middle of it.
SLOW_C = r"""
#include <unistd.h>
void scale(float *y, const float *x, int n)
{
    usleep(100000);
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""


def _job(tmp_path: Path, steps: int = 60, *extra: str) -> tuple[subprocess.Popen, Path]:
    spec = write_scale_spec(tmp_path, f'{{"STEP": list(range(1, {steps + 1})), "MODE": [0]}}')
    (tmp_path / "scale.c").write_text(SLOW_C)
    cache = tmp_path / "out.h5"
    job = start_mpitune(2, [str(spec), "--cache", str(cache), *extra], tmp_path)
    return job, cache


def _ranks(cache: Path) -> list[int]:
    """The job's processes: mpiexec, the ranks and their workers all name the cache file."""
    pids = subprocess.run(["pgrep", "-f", str(cache)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in pids]


def _rank0(cache: Path) -> int:
    """The pid of rank 0 (its environment says PMI_RANK=0 under MPICH, OMPI_COMM_WORLD_RANK=0
    under Open MPI)."""
    for pid in _ranks(cache):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if {b"PMI_RANK=0", b"OMPI_COMM_WORLD_RANK=0"} & set(environ) and b"mpitune" in cmdline:
            return int(pid)
    raise AssertionError("rank 0 not found")


def _rows(cache: Path) -> list[int]:
    with h5py.File(cache, "r", swmr=True) as f:  # readable while the run writes it
        return [int(i) for i in f["results"]["config_id"]]


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_ctrl_c_in_a_terminal_drains_the_batch_in_flight(tmp_path):
    """A terminal's Ctrl-C: SIGINT to the whole foreground group (mpiexec, ranks, workers)."""
    job, cache = _job(tmp_path)
    done = wait_for_batch(job, 2)
    started = time.monotonic()
    os.killpg(job.pid, signal.SIGINT)
    out, err = job.communicate(timeout=30)
    took = time.monotonic() - started
    assert job.returncode == 75, err
    _no_traceback(err)
    assert "received SIGINT: finishing what the ranks measure" in err
    assert "(signal)" in out
    assert took < 5, took  # one batch of 2 configurations, 0.4 s each
    rows = _rows(cache)
    assert len(rows) >= done and len(set(rows)) == len(rows)  # the batch in flight, if any, was recorded
    with h5py.File(cache, "r") as f:
        assert f["runs"][0]["status"] == b"signal"


def test_sigint_to_mpiexec_drains_like_sigterm(tmp_path):
    job, cache = _job(tmp_path)
    done = wait_for_batch(job, 2)
    started = time.monotonic()
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=30)
    assert job.returncode == 75, err
    _no_traceback(err)
    assert time.monotonic() - started < 5
    assert len(_rows(cache)) >= done


def test_second_sigint_stops_at_once_and_keeps_what_was_recorded(tmp_path):
    """Slurm's srun and a user's kill reach rank 0 itself; the second SIGINT, a second after the
    first, must not wait for the batch (here 8 configurations of 0.4 s per rank)."""
    job, cache = _job(tmp_path, 80, "--batch-size", "16")
    wait_for_batch(job, 1)
    recorded = _rows(cache)
    rank0 = _rank0(cache)
    os.kill(rank0, signal.SIGINT)
    time.sleep(1.0)
    started = time.monotonic()
    os.kill(rank0, signal.SIGINT)
    out, err = job.communicate(timeout=30)
    took = time.monotonic() - started
    assert job.returncode == 130, (out, err)
    _no_traceback(err)
    assert "interrupted twice: stopping now" in err
    assert took < 2, took  # the batch in flight needs about 3 s more
    check = subprocess.run(
        [sys.executable, "-m", "mpitune", "check", str(cache)],
        capture_output=True,
        text=True,
        env=mpi_env(),
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # Every row recorded before is intact; reports that came between the two signals were
    # written as they came (refilled), and nothing else.
    rows = _rows(cache)
    assert set(recorded) <= set(rows) and len(rows) == len(set(rows))
    assert not _ranks(cache)  # nothing left behind


def test_a_signal_stops_the_batch_already_on_its_way_after_a_configuration_and_a_rerun_measures_the_rest(tmp_path):
    """Two batches are in flight on two ranks (8 configurations of 0.4 s per rank each): a
    SIGTERM to every rank, as Slurm sends it, ends the run without measuring the whole of the
    second, whose unmeasured configurations the rerun measures, each once."""
    job, cache = _job(tmp_path, 80, "--batch-size", "16")
    wait_for_batch(job, 1)
    for pid in _ranks(cache):
        if pid != job.pid:
            os.kill(pid, signal.SIGTERM)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 75, err
    _no_traceback(err)
    assert "(signal)" in out
    rows = _rows(cache)
    with h5py.File(cache, "r") as f:
        asked = [int(i) for i in f["asked"]["config_id"]]
        assert f["runs"][0]["status"] == b"signal"
        assert not f["searches"]["continuable"].any()  # ids came back unmeasured
    assert len(set(rows)) == len(rows) and set(rows) < set(asked)
    # Each of the two ranks measured at least one configuration of every chunk it held, of
    # the two batches in flight at most.
    assert len(asked) - len(rows) <= 2 * 16 - 2 * 2
    rerun = start_mpitune(2, [str(tmp_path / "spec.py"), "--cache", str(cache)], tmp_path)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert sorted(_rows(cache)) == list(range(80))
