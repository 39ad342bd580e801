"""A quick run of benchmarks/scheduler.py, so that the script that measures the scheduler keeps working."""

import subprocess
import sys

from conftest import REPO, mpi_env


def test_scheduler_benchmark_quick_mode_prints_every_figure():
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scheduler.py"), "--quick"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "## Rank 0's cost per configuration: synthetic (1,024 configurations)" in out
    assert "us per configuration" in out and "efficiency" in out
    assert "| brute_force, interleaved (no cost model) | 128 |" in out  # what the cost model costs
    # The in-process simulation with the real Manager, dealing by cost and interleaved.
    simulated = next(line for line in out.splitlines() if line.startswith("| 8 | "))
    by_cost, interleaved = (float(cell.rstrip(" %")) for cell in simulated.split("|")[2:4])
    assert 0 < by_cost <= 100 and 0 < interleaved <= 100
    assert "replayed under mpiexec on 8 ranks, 2 per rank per batch: efficiency" in out
    assert "| dealt, double-buffered |" in out
    assert "pulled one at a time with no batches" in out
    assert "| genetic_algorithm | 2 |" in out  # the memory table
