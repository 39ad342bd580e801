"""jobscripts/das6.sh on a real (local, single-node) Slurm: drain at the time limit, resume.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (.ci/run installs them);
skipped where they are missing. The cluster is the tests' own (its own munged too) and is
stopped, jobs and all, however the tests end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from conftest import REPO, mpi_env, report_json, spin_c
from leftovers import uninterrupted

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("slurmctld", "slurmd", "sbatch", "munged")) or os.geteuid() != 0,
    reason="needs root and a Slurm installation (slurmctld, slurmd, slurm-client, munge)",
)

# Each call spins for about 50 ms, so a configuration (compile, warm-up, 3 timed calls)
# takes about 0.25 s and the whole search well over the job's one minute.
SPIN_C = spin_c(50)
SPEC = """
import numpy as np
lang = "C"
kernel_name = "spin"
kernel_source = "spin.c"
arguments = [np.zeros(16, np.float32), np.int32(16)]
answer = [np.ones(16, np.float32), None]
tune_params = {"VARIANT": list(range(400))}
iterations = 3
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    script = REPO / "tests" / "slurm" / "cluster.sh"
    env = mpi_env()
    env["SLURM_CONF"] = str(state / "slurm.conf")
    env["MPITUNE_ENV"] = str(Path(sys.executable).parent.parent)
    env["MPITUNE_REQUEUE"] = "0"
    try:
        subprocess.run(["bash", str(script), "start", str(state)], check=True, timeout=120)
        yield env
    finally:  # also when start failed half-way, or a test was interrupted
        with uninterrupted():
            # A session of their own: a Ctrl-C to the terminal's process group cannot stop them half-way.
            subprocess.run(
                ["scancel", "--user", "root"], env=env, timeout=30, capture_output=True, start_new_session=True
            )
            stopped = subprocess.run(
                ["bash", str(script), "stop", str(state)],
                capture_output=True,
                text=True,
                timeout=90,
                start_new_session=True,
            )
        assert stopped.returncode == 0, stopped.stderr  # it names what it could not stop


def sbatch(env, cwd: Path, args: list[str], timeout: float) -> tuple[int, str]:
    """Submit, wait for the job, return its exit code and its output. sbatch itself is killed
    at the timeout (not a `timeout` around it, whose death would leave sbatch polling); the
    fixture cancels the job."""
    out = cwd / f"job-{time.monotonic_ns()}.out"
    try:
        proc = subprocess.run(
            ["sbatch", "--wait", "--output", str(out), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"sbatch --wait timed out after {timeout} s: {e.stdout}{e.stderr}")
    return proc.returncode, out.read_text() if out.exists() else proc.stderr


def test_das6_job_drains_at_its_time_limit_and_the_next_job_resumes(slurm, tmp_path):
    (tmp_path / "spin.c").write_text(SPIN_C)
    (tmp_path / "spec.py").write_text(SPEC)
    cache = tmp_path / "spin.h5"
    job = [str(REPO / "jobscripts" / "das6.sh"), "spec.py", "--cache", str(cache)]
    shape = ["--ntasks-per-node=2", "--gres=gpu:2", "--cpus-per-task=4"]

    rc, log = sbatch(slurm, tmp_path, [*shape, "--time=1", "--signal=B:USR1@50", *job], timeout=170)
    assert rc == 75, log
    assert "the time limit is near" in log and "stopped early" in log and "USR1" in log
    with h5py.File(cache, "r") as f:
        first = len(f["results"])
        assert f["runs"][0]["status"] == b"signal" and f["runs"][0]["ranks"] == 2
    assert 0 < first < 400

    rc, log = sbatch(slurm, tmp_path, [*shape, "--time=10", *job], timeout=400)
    assert rc == 0, log
    with h5py.File(cache, "r") as f:
        ids = sorted(f["results"]["config_id"])
        runs = f["runs"][...]
        ranks = f["ranks"][...]
    assert ids == list(range(400))  # every configuration exactly once
    assert [r.decode() for r in runs["status"]] == ["signal", "finished"]
    assert list(runs["measured"]) == [first, 400 - first]
    assert sorted(zip(ranks["run"], ranks["rank"])) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    summary = report_json(cache)
    assert summary["configs"] == 400 and summary["runs"] == 2
    for r in summary["per_rank"]:  # both jobs' time, and it adds up
        assert r["busy_s"] + r["idle_s"] == pytest.approx(r["wall_s"], rel=0.03)


def test_srun_with_the_wrong_mpi_plugin_is_refused(slurm, tmp_path):
    (tmp_path / "spin.c").write_text(SPIN_C)
    (tmp_path / "spec.py").write_text(SPEC)
    env = dict(slurm, MPITUNE_SRUN_MPI="none")
    rc, log = sbatch(
        env,
        tmp_path,
        [
            "--ntasks-per-node=2",
            "--gres=gpu:2",
            "--cpus-per-task=4",
            "--time=2",
            str(REPO / "jobscripts" / "das6.sh"),
            "spec.py",
        ],
        timeout=120,
    )
    assert rc == 2, log
    assert log.count("MPI sees a world of 1 rank") == 1
    assert "--mpi=pmi2 for MPICH" in log
