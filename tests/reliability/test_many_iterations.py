"""Many launches a configuration (issue 41, class 4): a SIGTERM while ranks time configurations
of 100,000 launches each drains as promised (each rank finishes what it measures, exit 75, no
traceback), every row it recorded holds all its launches, and the rerun measures the rest."""

from __future__ import annotations

import os
import signal
import time

import h5py
from conftest import check_file, file_pid, start_mpitune, wait_for_batch, write_scale_spec

ITERATIONS = 100_000


def test_a_sigterm_during_configurations_of_a_hundred_thousand_launches_drains_and_the_rerun_finishes(tmp_path):
    spec = write_scale_spec(
        tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0]}', extra=f"iterations = {ITERATIONS}\n"
    )
    cache = tmp_path / "spec.h5"
    args = [str(spec), "--confirm", "0", "--no-calibrate", "--strategy", "brute_force"]
    job = start_mpitune(2, args, tmp_path)
    wait_for_batch(job, 1)
    signalled = time.monotonic()
    for rank in (0, 1):  # as Slurm signals every task
        os.kill(file_pid(cache, rank), signal.SIGTERM)
    out, err = job.communicate(timeout=300)
    drained_s = time.monotonic() - signalled
    assert job.returncode == 75, err[-3000:]
    assert "Traceback" not in err and "(signal)" in out, err[-3000:]
    assert drained_s < 120  # generous: each rank finishes one or two configurations of about a second
    check_file(cache)
    with h5py.File(cache, "r") as f:
        rows = f["results"][...]
    assert 0 < len(rows) < 6
    assert all(r["launches"] == ITERATIONS or r["raced"] for r in rows)  # each recorded one whole
    rerun = start_mpitune(2, args, tmp_path)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    with h5py.File(cache, "r") as f:
        ids = sorted(int(i) for i in f["results"]["config_id"])
        statuses = {s.decode() for s in f["results"]["status"]}
    assert ids == list(range(6)) and statuses == {"ok"}
