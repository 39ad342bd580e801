"""A rank that stops answering (issue 14, items 4a, 4b, 4d): stopped with SIGSTOP, or killed.

Real mpiexec runs of three ranks on the C backend. The deadline is kept small (a floor of 2 s
and ``timeout_s = 2`` in the spec, so a batch of one 0.2 s configuration per rank may take
about 3 s), so that each case takes seconds; without the deadline a stopped rank held the job
until the test's own timeout.
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

CONFIGS = 24
# 50 ms per launch: verify + 3 iterations make 0.2 s per configuration.
SLOW_C = r"""
#include <unistd.h>
void scale(float *y, const float *x, int n)
{
    usleep(50000);
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""


def _spec(tmp_path: Path, schedule: str = "auto") -> list[str]:
    params = f'{{"STEP": list(range(1, {CONFIGS + 1})), "MODE": [0]}}'
    spec = write_scale_spec(tmp_path, params, extra="timeout_s = 2\n")
    (tmp_path / "scale.c").write_text(SLOW_C)
    return [str(spec), "--out", str(tmp_path / "out.h5"), "--rank-deadline-floor", "2", "--schedule", schedule]


def _resumes_once(tmp_path: Path, args: list[str]) -> str:
    """The same command completes the space, and every configuration is in the file once; what
    it printed."""
    again = mpitune(3, args, tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    assert sorted(recorded_ids(tmp_path / "out.h5")) == list(range(CONFIGS))
    return again.stdout


def _gone(pid: int) -> None:
    """Let nothing of the test outlive it: a stopped process is woken and killed."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _outlived(pid: int) -> bool:
    """Whether the process is still there a second after its job ended."""
    for _ in range(20):
        if not _alive(pid):
            return False
        time.sleep(0.05)
    return True


def _stop_mid_run(
    tmp_path: Path, rank: int, schedule: str = "auto"
) -> tuple[subprocess.CompletedProcess, float, int, bool]:
    """SIGSTOP one rank after the second batch; the job's result, how long it took to end
    after the stop, the configurations done before it, and whether the stopped rank outlived it."""
    args = _spec(tmp_path, schedule)
    job = start_mpitune(3, args, tmp_path)
    pid = -1
    try:
        done = wait_for_batch(job, 2)
        pid = file_pid(tmp_path / "out.h5", rank)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        out, err = job.communicate(timeout=60)
        took = time.monotonic() - stopped
        left = _outlived(pid)
    finally:
        if pid > 0:
            _gone(pid)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    return subprocess.CompletedProcess(job.args, job.returncode, out, err), took, done, left


@pytest.mark.parametrize("schedule", ["auto", "refill"])
def test_a_stopped_worker_ends_the_run_with_one_line_and_it_resumes(tmp_path, schedule):
    """'refill': the other worker, which has reported all it held, waits for rank 0 while rank
    0 waits for rank 2's orders, due by their own deadlines; it must not take rank 0 for lost."""
    ended, took, done, left = _stop_mid_run(tmp_path, 2, schedule)
    assert ended.returncode == 75, ended.stderr
    # The batch may take about 3 s (4 x 0.2 s measured + the 2 s timeout), with a floor of 2 s.
    assert took < 12, took
    ours = [line for line in ended.stderr.splitlines() if line.startswith("mpitune:")]
    assert len(ours) == 1, ended.stderr
    assert f"rank 2 on {socket.gethostname()} did not answer within" in ours[0]
    assert "rerun the same command to resume" in ours[0]
    assert "Traceback" not in ended.stderr and "BAD TERMINATION" not in ended.stderr + ended.stdout
    assert "(silent_rank)" in ended.stdout
    assert not left
    cache = tmp_path / "out.h5"
    check_file(cache)
    rows = recorded_ids(cache)
    assert len(rows) >= done and len(set(rows)) == len(rows)
    with h5py.File(cache, "r") as f:
        assert f["runs"][0]["status"] == b"silent_rank"
    resumed = _resumes_once(tmp_path, _spec(tmp_path, schedule))
    # Not "killed": the run before ended itself when a rank stopped answering.
    assert "the previous run ended when a rank stopped answering while batch" in resumed, resumed


def test_a_stopped_rank_0_ends_the_workers(tmp_path):
    """Rank 0's node lost: the workers give up on it once its batch and turnaround are overdue."""
    ended, took, done, left = _stop_mid_run(tmp_path, 0)
    assert ended.returncode == 75, ended.stderr
    assert took < 20, took
    assert "rank 0 on" in ended.stderr and "sent nothing for" in ended.stderr
    assert "Traceback" not in ended.stderr
    assert not left
    cache = tmp_path / "out.h5"
    check_file(cache)  # the stopped writer is repaired after: its batch in flight is named
    assert len(recorded_ids(cache)) >= done
    _resumes_once(tmp_path, _spec(tmp_path))


@pytest.mark.parametrize("rank", [1])
def test_a_killed_worker_ends_the_job_within_seconds(tmp_path, rank):
    args = _spec(tmp_path)
    job = start_mpitune(3, args, tmp_path)
    try:
        done = wait_for_batch(job, 2)
        os.kill(file_pid(tmp_path / "out.h5", rank), signal.SIGKILL)
        killed = time.monotonic()
        job.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode != 0
    assert took < 10, took
    cache = tmp_path / "out.h5"
    check_file(cache)
    assert len(recorded_ids(cache)) >= done
    _resumes_once(tmp_path, args)
