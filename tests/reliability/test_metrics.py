"""Class 10: a metric that gives inf, or a negative value under higher-is-better, cannot rank a
configuration. The run says so once, naming the objective and the value, and keeps the rows
(status ok, with the value), rather than ending with a bare "no configuration passed"."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import mpitune, write_scale_spec

from mpitune.store.reader import read

CASES = {
    "inf": ('lambda p: float("inf")', "inf"),
    "negative": ("lambda p: -p['time']", "-"),
    "zero": ("lambda p: 0.0", "0.0"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unrankable_higher_is_better_metric_is_named_once_and_rows_are_kept(tmp_path, case):
    fn, value = CASES[case]
    spec = write_scale_spec(
        tmp_path,
        '{"STEP": [1, 2, 4, 8], "MODE": [0]}',
        extra=f"""
        metrics = {{"GFLOP/s": {fn}}}
        objective = "GFLOP/s"
        objective_higher_is_better = True
        """,
    )
    cache = tmp_path / "out.h5"
    started = time.monotonic()
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 60
    warnings = [line for line in proc.stderr.splitlines() if "objective 'GFLOP/s' is" in line]
    assert len(warnings) == 1, proc.stderr  # once, not once per configuration
    assert f"is {value}" in warnings[0] and "higher-is-better" in warnings[0] and "positive" in warnings[0]
    data = read(str(cache))
    assert sorted(data.results["config_id"]) == [0, 1, 2, 3]
    assert all(str(s) == "ok" for s in data.results["status"])
    recorded = data.metrics[:, data.metric_names.index("GFLOP/s")]
    assert not np.isnan(recorded).any()  # the value itself is kept, not dropped for NaN


def test_a_lower_is_better_infinite_objective_is_named_too(tmp_path):
    spec = write_scale_spec(
        tmp_path,
        '{"STEP": [1, 2], "MODE": [0]}',
        extra="""
        metrics = {"energy": lambda p: float("inf")}
        objective = "energy"
        """,
    )
    proc = mpitune(1, [str(spec), "--cache", str(tmp_path / "out.h5")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "objective 'energy' is inf" in line]
    assert len(warnings) == 1 and "lower-is-better" in warnings[0], proc.stderr
