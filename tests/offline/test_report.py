"""The report of a real run's file: problem, devices, runs, top-k, per-rank breakdown."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import mpi_env, mpitune, report_json, write_scale_spec

PHASES = ("spec", "startup", "strategy", "compile", "verify", "benchmark", "write", "other", "wait")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Two runs on 2 ranks: the first stops after 4 configurations, the second resumes; every
    launch timed (no racing), so that the top holds every iteration and the four that pass are
    candidates of the confirmation."""
    tmp = tmp_path_factory.mktemp("report")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]}', extra="racing = False\n")
    for extra in (["--max-fevals", "4"], []):
        proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5"), *extra], tmp)
        assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


def report(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", *map(str, args)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_json_keeps_the_core_keys_and_adds_devices_runs_and_phases(cache):
    s = report_json(cache)
    assert s["configs"] == 12 and s["ok"] == 4 and s["runs"] == 2 and s["ranks"] == 2
    assert s["failed"] == {"compile_error": 4, "verify_failed": 4}
    assert s["best"]["config"]["MODE"] == 0
    [device] = s["devices"]
    assert device["ranks"] == [0, 1] and device["host"] and device["device"]
    first, second = s["run_list"]
    assert (first["status"], first["measured"], first["max_fevals"]) == ("max_fevals", 4, 4)
    assert (second["status"], second["measured"]) == ("finished", 8)
    assert s["wall_s"] == pytest.approx(first["wall_s"] + second["wall_s"])
    assert s["problem"]["params"] == {"STEP": 4, "MODE": 3} and s["problem"]["iterations"] == 3
    for r in s["per_rank"]:
        assert set(PHASES) <= set(r["phases"])
        assert sum(r["phases"].values()) == pytest.approx(r["wall_s"], rel=0.03)
        assert r["busy_s"] + r["idle_s"] == pytest.approx(r["wall_s"], rel=0.03)
        assert r["other_s"] == pytest.approx(r["busy_s"] - r["compile_s"] - r["verify_s"] - r["benchmark_s"])
        assert r["wait_s"] == r["idle_s"] and r["startup_s"] > 0 and r["compile_s"] > 0
        assert 0 < r["efficiency"] <= 1
    assert s["per_rank"][0]["strategy_s"] > 0  # rank 0 runs the strategy
    assert s["per_rank"][0]["spec_s"] > 0 and s["per_rank"][1]["spec_s"] == 0  # and loads the spec
    startup = s["startup"]
    assert startup["spec_s"] == s["per_rank"][0]["spec_s"]
    assert 0 < startup["mpitune_min_s"] <= startup["mpitune_max_s"] == max(r["startup_s"] for r in s["per_rank"])
    assert sum(r["configs"] for r in s["per_rank"]) == 12


def test_json_keys_stand_in_the_order_earlier_versions_wrote(cache):
    """Scripts read ``report --json``: the summary's records write the same keys, in the same order."""
    s = report_json(cache)
    assert list(s) == [
        "kernel", "lang", "space_size", "configs", "ok", "failed", "best", "objective", "top", "median_ms",
        "worst_ms", "runs", "ranks", "wall_s", "per_rank", "efficiency", "gather", "startup", "problem",
        "devices", "run_list", "pareto", "confirmation", "confirmation_cost", "calibration", "throttled",
        "prior",
    ]  # fmt: skip
    assert s["prior"] == []  # the runs started from no prior
    ranked = ["config", "config_id", "time_ms", "objective", "metrics", "observed"]
    assert list(s["best"]) == ranked and list(s["top"][0]) == ranked + ["min_ms", "max_ms", "std_ms", "iterations"]
    assert list(s["objective"]) == ["name", "higher_is_better", "metrics", "observed", "median", "worst"]
    assert list(s["per_rank"][0]) == [
        "rank", "host", "device", "device_detail", "compile_s", "verify_s", "benchmark_s", "other_s", "busy_s",
        "idle_s", "wall_s", "spec_s", "startup_s", "strategy_s", "write_s", "wait_s", "phases", "configs",
        "compile_ahead_s", "efficiency",
    ]  # fmt: skip
    assert list(s["gather"]) == ["rank_batches", "waited", "threshold", "wait_s"]
    assert list(s["startup"]) == ["spec_s", "mpitune_min_s", "mpitune_max_s"]
    assert list(s["problem"]) == ["kernel", "lang", "problem_size", "iterations", "params", "imported_from"]
    assert list(s["devices"][0]) == ["host", "device", "ranks"]
    # Keys added since come last.
    assert list(s["run_list"][0]) == [
        "run", "started", "wall_s", "finished", "status", "ranks", "strategy", "seed", "max_fevals",
        "time_limit_s", "batch_size", "space_size", "measured", "command", "version", "schedule", "in_turn",
    ]  # fmt: skip
    assert s["pareto"] is None and s["problem"]["imported_from"] is None
    assert list(s["confirmation"]) == ["winner", "winner_ms", "ci_ms", "tied"]
    assert list(s["confirmation_cost"]) == ["run", "candidates", "launches", "seconds", "share_of_run", "owed"]
    assert all(list(c) == ["rank", "host", "device", "factor", "flagged"] for c in s["calibration"])
    assert s["throttled"] == []  # a CPU: nothing watched its clocks


def test_top_k_with_the_spread_of_iterations(cache):
    s = json.loads(report(cache, "--json", "--top", "2"))
    assert len(s["top"]) == 2
    for t in s["top"]:
        assert t["min_ms"] <= t["time_ms"] <= t["max_ms"] and t["iterations"] == 3
        # The deviation of three times spanning max - min: at least span / sqrt(6) (the middle one
        # halfway), at most span * sqrt(2) / 3 (two of them equal).
        span_ms = t["max_ms"] - t["min_ms"]
        assert span_ms / math.sqrt(6) * (1 - 1e-9) <= t["std_ms"] <= span_ms * math.sqrt(2) / 3 * (1 + 1e-9), t
    assert s["top"][0]["time_ms"] <= s["top"][1]["time_ms"] <= s["median_ms"] <= s["worst_ms"]


def test_text_names_problem_devices_runs_and_every_phase(cache):
    text = report(cache, "--top", "3")
    assert "kernel scale (C)" in text
    assert "devices:" in text and "ranks 0-1" in text
    assert "2 run(s)" in text and "max_fevals: 4 configurations" in text and "finished: 8 configurations" in text
    assert "ok 4, compile_error 4, verify_failed 4" in text
    top = text.split("top 3", 1)[1].split("\n\n", 1)[0]
    assert top.count("MODE=0") == 3
    assert "confirmed (run 1: 4 candidates" in text and "winner " in text  # the four that pass
    header = next(line for line in text.splitlines() if line.strip().startswith("rank  host"))
    for column in ("spec", "startup", "strategy", "compile", "verify", "benchmark", "write", "other", "wait", "wall"):
        assert column in header
    assert "parallel efficiency" in text
    assert "start-up: loading the spec (its own code and the checks of what it defines) " in text


def test_a_missing_file_is_one_line_and_exit_code_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(tmp_path / "nope.h5")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("mpitune: error:")
