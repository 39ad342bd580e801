"""A short run of benchmarks/kill_soak.py: SIGKILL at random moments, check, resume."""

import subprocess
import sys

from conftest import REPO, mpi_env


def test_kills_at_random_moments_lose_nothing_recorded():
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "kill_soak.py"),
            "--kills",
            "4",
            "--size",
            "150",
            "--ranks",
            "2",
            "--seed",
            "5",
        ],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 of 4 kills passed the check; the final file is complete" in proc.stdout
