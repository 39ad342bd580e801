"""A rank that stops answering while its batch is long, or before the first batch (issue 14):
only the heartbeats (scheduling/faults/heartbeat.py) can notice it in seconds.

Real mpiexec runs of three ranks on the C backend, with a liveness timeout of 3 s
(``MPITUNE_TEST_LIVENESS_TIMEOUT_S`` sets another, to measure the default's: docs/reliability.md).
The kernel sleeps ``SLOW_S`` per launch (4 launches a configuration: the verify launch and 3
timed ones, so a chunk outlasts the timeout) while the flag file named by ``MPITUNE_TEST_SLOW``
exists, and next to nothing otherwise, so that a run is quick until the test makes its batches
long, and the rerun is quick again. A long batch's deadline is at least the 45 s floor: without
the heartbeats each case below waits that long (or, during start-up, for ever) and fails on the
test's own timeout. Each case prints the seconds from SIGSTOP to the job's end (``-rP``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import h5py
import pytest
from conftest import (
    check_file,
    file_pid,
    mpitune,
    recorded_ids,
    start_mpitune,
    wait_for_batch,
    write_scale_spec,
)

TIMEOUT_S = float(os.environ.get("MPITUNE_TEST_LIVENESS_TIMEOUT_S", "3"))
SLOW_S = max(2.0, TIMEOUT_S / 2)
CONFIGS = 9
REFILLED = 18  # a refilled run hands out a quick run's configurations faster: more to outlast the stop
SLOW_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void scale(float *y, const float *x, int n)
{
    const char *flag = getenv("MPITUNE_TEST_SLOW");
    const char *rank = getenv("PMI_RANK");
    const char *ranks = getenv("MPITUNE_TEST_SLOW_RANKS");
    if (flag && access(flag, F_OK) == 0 && !(ranks && rank && strcmp(ranks, "workers") == 0 && strcmp(rank, "0") == 0))
        usleep(atoi(getenv("MPITUNE_TEST_SLOW_US")));
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""


# In a spec: wait for MPI's start beside it (rank 0's heartbeat with it) to be done.
MPI_UP = (
    "import threading\nwhile any(t.name == 'mpitune-mpi-start' for t in threading.enumerate()):\n    time.sleep(0.01)\n"
)


def _spec(tmp_path: Path, load_s: float = 0.0, configs: int = CONFIGS) -> list[str]:
    """``load_s``: the spec sleeps that long, after touching 'loading' once MPI is up (a rank
    stopped before its MPI_Init holds every rank in theirs: docs/reliability.md)."""
    params = f'{{"STEP": list(range(1, {configs + 1})), "MODE": [0]}}'
    extra = "racing = False\n"  # a slow configuration must not lose a race and stop early
    if load_s:
        extra += "import pathlib, time\n" + MPI_UP
        extra += f"pathlib.Path('loading').touch()\ntime.sleep({load_s})\n"
    spec = write_scale_spec(tmp_path, params, extra=extra)
    (tmp_path / "scale.c").write_text(SLOW_C)
    # Batches of one configuration per rank, so that there is a third batch to make long.
    return [str(spec), "--out", str(tmp_path / "out.h5"), "--liveness-timeout", str(TIMEOUT_S), "--batch-size", "3"]


def _rank_pid(spec: str, rank: int, within_s: float = 30.0) -> int:
    """A rank's process id before the file records it: the process running ``spec`` whose
    launcher-given rank is ``rank`` (its children run other command lines)."""
    until = time.monotonic() + within_s
    while time.monotonic() < until:
        for entry in Path("/proc").iterdir():
            try:
                if (
                    entry.name.isdigit()
                    and spec.encode() in (entry / "cmdline").read_bytes().split(b"\0")
                    and f"PMI_RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0")
                ):
                    return int(entry.name)
            except OSError:
                continue
        time.sleep(0.1)
    pytest.fail(f"no process of rank {rank} within {within_s} s")


def _stop(job: subprocess.Popen, pid: int) -> tuple[subprocess.CompletedProcess, float]:
    """SIGSTOP ``pid``; the job's end and how long after the stop it came."""
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        # With the 3 s timeout, less than the 45 s floor of a long batch's deadline.
        out, err = job.communicate(timeout=max(40.0, TIMEOUT_S + 20))
        print(f"SIGSTOP of pid {pid} to the end of the job: {time.monotonic() - stopped:.1f} s")
        return subprocess.CompletedProcess(job.args, job.returncode, out, err), time.monotonic() - stopped
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def _stop_in_a_long_batch(tmp_path: Path, monkeypatch, rank: int, slow: str):
    """Run quick batches, make them long (on every rank, or on the workers only), and SIGSTOP
    ``rank`` once a long batch has started; the job's end, seconds from the stop, and the
    configurations done before the long batches."""
    flag = tmp_path / "slow"
    monkeypatch.setenv("MPITUNE_TEST_SLOW", str(flag))
    monkeypatch.setenv("MPITUNE_TEST_SLOW_RANKS", slow)
    monkeypatch.setenv("MPITUNE_TEST_SLOW_US", str(int(SLOW_S * 1e6)))
    job = start_mpitune(3, _spec(tmp_path), tmp_path)
    try:
        wait_for_batch(job, 1)
        flag.touch()
        done = wait_for_batch(job, 2)  # batch 3, dealt now, is long on every rank that is slow
        pid = file_pid(tmp_path / "out.h5", rank)
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        raise
    ended, took = _stop(job, pid)
    flag.unlink()
    return ended, took, done


def _ended_for_rank_2(ended: subprocess.CompletedProcess, took: float, tmp_path: Path) -> Path:
    """The job ended resumable within the liveness timeout, with the one line naming rank 2, and
    its file closed by mpitune as ``silent_rank`` (not repaired after); the file's path."""
    assert ended.returncode == 75, ended.stderr
    assert took < TIMEOUT_S + 6, took
    ours = [line for line in ended.stderr.splitlines() if line.startswith("mpitune:")]
    assert len(ours) == 1, ended.stderr
    assert f"rank 2 on {socket.gethostname()} sent no heartbeat for" in ours[0], ours[0]
    assert "rerun the same command to resume (exit code 75)" in ours[0]
    assert "Traceback" not in ended.stderr and "BAD TERMINATION" not in ended.stderr + ended.stdout
    cache = tmp_path / "out.h5"
    with h5py.File(cache, "r") as f:
        assert f["runs"][0]["status"] == b"silent_rank"
    return cache


def _resumes_once(tmp_path: Path, args: list[str] | None = None, configs: int = CONFIGS) -> None:
    again = mpitune(3, args or _spec(tmp_path), tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    assert sorted(recorded_ids(tmp_path / "out.h5")) == list(range(configs))


@pytest.mark.parametrize("slow", ["all", "workers"])
def test_a_worker_stopped_in_a_long_batch_ends_the_run_within_the_liveness_timeout(tmp_path, monkeypatch, slow):
    """slow 'all': rank 0 is measuring its own long chunk, so its heartbeat thread closes the
    file; 'workers': rank 0 waits in the gather, and its main thread ends the run."""
    ended, took, done = _stop_in_a_long_batch(tmp_path, monkeypatch, 2, slow)
    cache = _ended_for_rank_2(ended, took, tmp_path)
    rows = recorded_ids(cache)
    assert len(rows) >= done and len(set(rows)) == len(rows)
    checked = check_file(cache)
    assert "was in flight" in checked and "rank 2 held" in checked, checked
    assert "repaired" not in checked, checked
    if slow == "all":  # once is enough: the other case's file differs only in who closed it
        _resumes_once(tmp_path)


def test_rank_0_stopped_in_a_long_batch_ends_the_workers(tmp_path, monkeypatch):
    ended, took, done = _stop_in_a_long_batch(tmp_path, monkeypatch, 0, "all")
    assert ended.returncode == 75, ended.stderr
    assert took < TIMEOUT_S + 6, took
    assert f"rank 0 on {socket.gethostname()} sent no heartbeat for" in ended.stderr, ended.stderr
    assert "Traceback" not in ended.stderr
    cache = tmp_path / "out.h5"
    checked = check_file(cache)  # the stopped writer's file: repaired, and its batch in flight named
    assert "was in flight" in checked, checked
    assert len(recorded_ids(cache)) >= done  # the rerun after a stopped rank 0: test_silent_rank.py


def test_a_worker_stopped_during_start_up_ends_the_job(tmp_path):
    """Rank 0 loads a slow spec, MPI being up, while the workers wait in a collective, and one
    of them stops: its silence is noticed within the liveness timeout, not after the spec."""
    args = _spec(tmp_path, load_s=TIMEOUT_S + 27)
    job = start_mpitune(3, args, tmp_path)
    try:
        until = time.monotonic() + 30
        while not (tmp_path / "loading").exists() and time.monotonic() < until:
            time.sleep(0.05)
        pid = _rank_pid(args[0], 1)
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        raise
    ended, took = _stop(job, pid)
    assert ended.returncode == 75, ended.stderr
    assert took < TIMEOUT_S + 6, took
    ours = [line for line in ended.stderr.splitlines() if line.startswith("mpitune:")]
    assert len(ours) == 1, ended.stderr
    assert f"rank 1 on {socket.gethostname()} sent no heartbeat for" in ours[0], ours[0]
    assert "during start-up" in ours[0]
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("slow", ["all", "workers"])
def test_a_worker_stopped_in_a_refilled_run_ends_it_within_the_liveness_timeout(tmp_path, monkeypatch, slow):
    """``--schedule refill``: rank 0 takes each report as it comes (comm.py's ``receive``) while
    its lane measures its own orders. slow 'all': its lane is likely measuring a long one when
    rank 2 stops; 'workers': it has measured what was left of the quick ones. Either way the
    job ends within the liveness timeout with the one line, and every report that came is in
    the file already."""
    flag = tmp_path / "slow"
    monkeypatch.setenv("MPITUNE_TEST_SLOW", str(flag))
    monkeypatch.setenv("MPITUNE_TEST_SLOW_RANKS", slow)
    monkeypatch.setenv("MPITUNE_TEST_SLOW_US", str(int(SLOW_S * 1e6)))
    args = [*_spec(tmp_path, configs=REFILLED), "--schedule", "refill"]
    job = start_mpitune(3, args, tmp_path)
    try:
        done = wait_for_batch(job, 1)
        flag.touch()  # from now on each configuration a slow rank starts outlasts the timeout
        pid = file_pid(tmp_path / "out.h5", 2)
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        raise
    ended, took = _stop(job, pid)
    flag.unlink()
    cache = _ended_for_rank_2(ended, took, tmp_path)
    rows = recorded_ids(cache)
    # Each report went into the file as it came: every configuration a progress line counted.
    progress = [line.split()[3] for line in ended.stdout.splitlines() if line.startswith("mpitune: batch ")]
    assert len(rows) >= max([done, *(int(p.split("/")[0]) for p in progress)]) and len(set(rows)) == len(rows)
    checked = check_file(cache)
    assert "was in flight" in checked and "rank 2 held" in checked, checked
    assert "repaired" not in checked, checked
    if slow == "all":
        _resumes_once(tmp_path, args, REFILLED)
