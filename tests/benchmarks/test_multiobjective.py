"""benchmarks/multiobjective.py on one shared cache, briefly (random sampling, whose asks cost
nothing): the command line first, a row per strategy, and ratios that are hypervolume fractions
(0 to 1, and 1 once the whole space, so the whole brute-force front, was measured)."""

import re
import subprocess
import sys

from conftest import REPO, mpi_env


def test_the_benchmark_prints_its_command_and_hypervolume_ratios(tmp_path, pnpoly):
    (tmp_path / pnpoly.name).symlink_to(pnpoly)
    args = [str(tmp_path), "--repeats", "2", "--budgets", "16", "5000", "--strategies", "random_sample"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "multiobjective.py"), *args],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "command: python " + " ".join([str(REPO / "benchmarks" / "multiobjective.py"), *args])
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and "(" in line}  # the cache's
    assert set(rows) == {"random_sample"}
    for row in rows.values():
        small, whole = (float(m) for m in re.findall(r"\| (\d\.\d{3}) \(", row))
        assert 0 < small < 1 and whole == 1.0  # 5000: the whole space of 4092, so the whole front
