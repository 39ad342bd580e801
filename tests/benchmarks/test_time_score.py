"""benchmarks/time_score.py: the baseline's arithmetic on numbers worked by hand, and a real
replay of a shared cache scored over time."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import time_score  # noqa: E402  (a script beside its siblings, as they import each other)

# Nine valid times 1..9 ms, every configuration costing 2 s (mean and median).
SPACE = time_score.Space(np.arange(1.0, 10.0), configurations=9, mean_cost_s=2.0, median_cost_s=2.0)


def test_random_search_expects_the_mean_after_one_draw_and_the_best_after_all():
    # after 4 draws the k-th best is the least with C(9 - k, 3) / C(9, 4): 56, 35, 20, 10, 4, 1 of
    # 126 for k = 1..6, so 252 / 126 = 2 ms
    expected = SPACE.random_best_ms(np.array([0.0, 1.0, 4.0, 9.0, 100.0]))
    assert expected == pytest.approx([5.0, 5.0, 2.0, 1.0, 1.0])


def test_failed_configurations_cost_draws_and_count_as_the_median_when_alone():
    # 1 and 2 ms valid, 2 failed: one draw finds 1, 2 or nothing (median 1.5) alike, 1.5 ms
    space = time_score.Space(np.array([1.0, 2.0]), configurations=4, mean_cost_s=1.0, median_cost_s=1.0)
    assert space.random_best_ms(np.array([1.0]))[0] == pytest.approx(1.5)
    # two draws: P(1 ms) = 3/6, P(2 ms, not 1) = 2/6, P(both failed) = 1/6: 1/2 + 2/3 + 1.5/6
    assert space.random_best_ms(np.array([2.0]))[0] == pytest.approx(0.5 + 2 / 3 + 0.25)


def test_the_cutoff_is_where_random_search_expects_that_share_of_the_gap_closed():
    # 0.75: 1 + (5 - 1) * 0.25 = 2 ms; 7 times are slower, ceil(7 / (10 - 7)) = 3 draws of 2 s
    assert SPACE.cutoff_s(0.75) == 6.0
    # 0.5: 3 ms; 6 slower, ceil(6 / 4) = 2 draws
    assert SPACE.cutoff_s(0.5) == 4.0
    assert SPACE.time_range_s(0.5, 0.75)[[0, -1]].tolist() == [4.0, 6.0]


def test_a_search_scores_one_at_the_optimum_zero_as_random_search_and_below_it_when_worse():
    at_s = np.array([2.0, 8.0])  # random search expects 5 ms after 1 draw, 2 ms after 4
    found_at_once = time_score.hub_score(SPACE, np.array([0.5]), np.array([1.0]), at_s)
    assert found_at_once == 1.0
    as_random = time_score.hub_score(SPACE, np.array([1.0, 7.0]), np.array([5.0, 2.0]), at_s)
    assert as_random == pytest.approx(0.0, abs=1e-12)
    # nothing valid: the median all along, 0 against the first draw, (5 - 2) / (1 - 2) against 4
    nothing = time_score.hub_score(SPACE, np.array([1.0]), np.array([math.nan]), at_s)
    assert nothing == pytest.approx((0.0 - 3.0) / 2)
    # results count from when they reach rank 0: the optimum found at 9 s is too late for both
    late = time_score.hub_score(SPACE, np.array([9.0]), np.array([1.0]), at_s)
    assert late == nothing


def test_the_script_replays_a_shared_cache_on_one_and_two_ranks_beside_kernel_tuner(pnpoly, tmp_path):
    pytest.importorskip("kernel_tuner")
    (tmp_path / pnpoly.name).symlink_to(pnpoly)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, str(REPO / "benchmarks" / "time_score.py"), str(tmp_path), "--ranks", "1", "2"]
    command += ["--repeats", "1", "--cutoff", "0.9", "--kt-strategies", "greedy_ils"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "| cache | range (s) | 1 rank | 2 ranks | KT greedy_ils, 1 device |" in done.stdout
    number = r"(-?[\d.]+)"
    row = re.search(
        rf"^\| pnpoly_RTX_3090 \| ([\d.]+)-([\d.]+) \| {number} \| {number} \| {number} \|$", done.stdout, re.M
    )
    assert row, done.stdout
    start_s, end_s, one, two, kt = map(float, row.groups())
    assert 0 < start_s < end_s
    assert all(math.isfinite(score) and score <= 1 for score in (one, two, kt))  # no lower bound: see hub_score
    assert two > one  # two ranks find as much in less time


def test_a_kernel_tuner_run_is_timed_by_the_caches_own_costs(pnpoly, tmp_path):
    """Kernel Tuner's run stops at its own time limit on the cache's costs: the last entry ends
    within one configuration's cost of the limit, and the entries are its results in order."""
    pytest.importorskip("kernel_tuner")
    finished_s, time_ms = time_score.kt_search(str(pnpoly), "random_sample", 0, 20.0, 90.0, str(tmp_path))
    assert len(finished_s) == len(time_ms) > 10
    assert np.all(np.diff(finished_s) >= 0) and 19.0 < finished_s[-1] < 25.0
    assert np.isfinite(time_ms).any() and np.nanmin(time_ms) >= 8.714  # the cache's best is 8.714 ms


def test_strategies_py_prints_the_score_over_time_too(pnpoly, tmp_path):
    """``benchmarks/strategies.py --over-time`` prints time_score.py's table for the default on 1
    and --ranks ranks, and the command that reruns it."""
    (tmp_path / pnpoly.name).symlink_to(pnpoly)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, str(REPO / "benchmarks" / "strategies.py"), str(tmp_path), "--ranks", "2"]
    done = subprocess.run(
        command + ["--repeats", "1", "--over-time"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert f"benchmarks/time_score.py {tmp_path} --ranks 1 2 --repeats 1 --kt-strategies" in done.stdout
    row = re.search(r"^\| pnpoly_RTX_3090 \| [\d.]+-[\d.]+ \| (-?[\d.]+) \| (-?[\d.]+) \|$", done.stdout, re.M)
    assert row, done.stdout
    one, two = map(float, row.groups())
    assert two > one  # two ranks find as much in less time
