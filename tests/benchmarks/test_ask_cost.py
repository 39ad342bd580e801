"""benchmarks/ask_cost.py runs, and prints a row per stretch of results with the figure's line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ask_cost_prints_a_row_per_stretch_and_the_largest_mean():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, str(REPO / "benchmarks" / "ask_cost.py"), "--results", "256", "--every", "128"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^\| ([\d,]+)-([\d,]+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \|", done.stdout, re.M)
    assert [(a, b) for a, b, *_ in rows] == [("0", "128"), ("128", "256")], done.stdout
    assert all(int(asks) == 4 for _, _, asks, *_ in rows)  # 32 ids per ask
    assert all(0 < float(mean) <= float(largest) for *_, mean, largest in rows)
    largest_mean = re.search(r"largest mean per ask over a stretch: ([\d.]+) ms", done.stdout)
    assert largest_mean and float(largest_mean.group(1)) == max(float(r[3]) for r in rows)
