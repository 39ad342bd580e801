"""A short run of benchmarks/startup.py, so that the script that measures start-up keeps working."""

import subprocess
import sys

from conftest import REPO, mpi_env


def test_startup_benchmark_splits_a_rank_start_up_from_the_spec():
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "startup.py"), "--ranks", "1", "--repeat", "1"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 1 | 0 |"))
    cells = [float(cell) for cell in row.split("|")[3:12]]
    before, spec, startup, waiting, first, beyond, spawned, warm, first_compile = cells
    assert before > 0 and spec > 0 and startup > 0
    assert waiting <= 0.05  # one rank: its collectives are with itself, nobody to wait for
    # To the first configuration, all of it (five figures, each printed to 0.01 s).
    assert first >= before + spec + startup + waiting - 0.025
    assert abs(beyond - (first - spec)) <= 0.011  # each printed to 0.01 s
    # The measuring worker was spawned before the run's clock (before MPI and the spec) and was
    # warm before the rank measured anything. Both are rounded to 0.01 s, and the worker is spawned
    # only milliseconds before the clock starts, so the two may print the same.
    assert 0 < spawned <= before and spawned <= warm <= first + 0.01
    assert first_compile > 0  # the C backend compiles the first configuration itself
    assert "slowest rank's start-up beyond the spec: " in proc.stdout
    alone = next(line for line in proc.stdout.splitlines() if line.startswith("the spec alone"))
    alone_s = float(alone.split(": ")[1].split(" s;")[0])
    beyond_alone_s = float(alone.rsplit(": ", 1)[1].removesuffix(" s"))
    assert alone_s > 0 and abs(beyond_alone_s - (first - alone_s)) <= 0.011
