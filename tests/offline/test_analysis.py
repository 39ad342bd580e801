"""The pandas loader, on the file of a real run (real mpiexec, real gcc, real HDF5)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mpitune.errors import UserError
from mpitune.model.schema import RESULT_COLUMNS

pd = pytest.importorskip("pandas")


@pytest.fixture
def cache(run_with_failures):
    return run_with_failures


def test_results_one_row_per_configuration_with_parameters_and_statistics(cache):
    from mpitune.analysis import load

    results, _ = load(str(cache))
    assert len(results) == 12 and results["config_id"].is_unique
    assert {"STEP", "MODE", "status", "time_ms", "iterations", "min_ms", "mean_ms", "max_ms", "std_ms",
            "times_ms", "compile_s", "verify_s", "benchmark_s", "rank", "host", "device", "batch",
            "started", "finished"} <= set(results.columns)
    assert results.groupby("MODE")["status"].first().to_dict() == {
        0: "ok", 1: "compile_error", 2: "verify_failed"}
    ok = results[results["status"] == "ok"]
    assert (ok["iterations"] == 3).all()
    assert (ok["min_ms"] <= ok["time_ms"]).all() and (ok["time_ms"] <= ok["max_ms"]).all()
    assert all(len(t) == 3 for t in ok["times_ms"])
    assert results.loc[results["status"] == "compile_error", "time_ms"].isna().all()
    assert set(results["rank"]) == {0, 1}
    assert (results["finished"] >= results["started"]).all()
    assert str(results["started"].dt.tz) == "UTC"
    assert results.attrs["param_names"] == ["STEP", "MODE"]
    # Every result field of the schema, in the schema's order around the parameters and statistics.
    fields = ["config_id", "STEP", "MODE", *(c.name for c in RESULT_COLUMNS)]
    assert [c for c in results.columns if c in fields] == fields
    assert results.attrs["runs"]["strategy"].iloc[0] == "brute_force"


def test_timeline_covers_every_rank_without_overlap(cache):
    from mpitune.analysis import load

    _, timeline = load(str(cache))
    assert {"compile", "benchmark", "wait", "startup", "strategy"} <= set(timeline["phase"])
    assert np.allclose(timeline["duration_s"], timeline["end_s"] - timeline["start_s"])
    for _, rows in timeline.groupby("rank"):
        rows = rows.sort_values("start_s")
        assert (rows["start_s"].to_numpy()[1:] - rows["end_s"].to_numpy()[:-1]).min() > -1e-6
        assert rows["duration_s"].sum() == pytest.approx(rows["end_s"].max(), rel=0.02, abs=0.01)
    assert (timeline["host"] != "").all() and (timeline["device"] != "").all()


def test_without_pandas_a_clear_error(cache, monkeypatch):
    from mpitune.offline import analysis

    monkeypatch.setitem(sys.modules, "pandas", None)  # makes "import pandas" fail
    with pytest.raises(UserError, match="pip install"):
        analysis.load(str(cache))
