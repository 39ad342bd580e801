"""The objective and metrics: evaluation on one result, scores, the load-time check; then real
runs with the C backend and replays that optimise a higher-is-better metric."""

from __future__ import annotations

import json
import logging
import math

import h5py
import numpy as np
import pytest
from conftest import mpitune, report_json, write_scale_spec

from mpitune.analysis import load
from mpitune.model.objective import Goal, Metric, Objective, expression, first_mistake, sample
from mpitune.model.result import Result
from mpitune.offline.exchange import export_t4, kt_document
from mpitune.store.reader import read

N = 4096  # elements of the scale spec in conftest
GFLOPS = {"GFLOP/s": lambda p: N / 1e9 / (p["time"] / 1e3)}


def metric(name, fn):
    return Metric(name, fn, name)


def test_the_goal_reads_back_from_the_record_the_file_holds():
    """One record of the objective: what the writer records is what the reader's ``Goal`` is."""
    one = Objective("GFLOP/s", True, [metric("GFLOP/s", GFLOPS["GFLOP/s"])])
    two = Objective(["time", "GFLOP/s"], [False, True], [metric("GFLOP/s", GFLOPS["GFLOP/s"])])
    for objective in (one, two):
        record = json.loads(json.dumps(objective.record()))  # as the file's attribute holds it
        assert Goal.from_record(record) == objective.goal
    assert "objectives" not in one.record() and two.goal.several and two.goal.directions == (False, True)
    assert one.goal.metrics == {"GFLOP/s": "GFLOP/s"} and not one.goal.is_kernel_time
    # A file written before metrics existed records none: time, lower is better.
    assert Goal() == Goal.from_record({"objective": "time", "higher_is_better": False})
    assert Goal().is_kernel_time and Goal().key() == ["time", False]
    with pytest.raises(ValueError, match="do not pair up"):
        Goal(("time", "energy"), (False,))


def test_p_holds_params_times_observed_and_earlier_metrics():
    seen = {}

    def spy(p):
        seen.update(p)
        return p["double"] + p["power_w"]

    objective = Objective(
        "energy",
        metrics=[metric("double", lambda p: 2 * p["time"] * p["bs"]), metric("energy", spy)],
        observed_names=["power_w"],
    )
    r = objective.evaluate(Result(0, "ok", time_ms=3.0, times_ms=[2.0, 3.0, 4.0], observed={"power_w": 5.0}), {"bs": 2})
    assert seen == {"bs": 2, "time": 3.0, "time_ms": 3.0, "times": [2.0, 3.0, 4.0], "power_w": 5.0, "double": 12.0}
    assert r.metrics == {"double": 12.0, "energy": 17.0} and r.objective == 17.0 and r.score == 17.0


def test_a_declared_observed_value_the_backend_did_not_report_is_nan():
    objective = Objective("power_w", observed_names=["power_w"])
    r = objective.evaluate(Result(0, "ok", time_ms=1.0), {})
    assert math.isnan(r.objective) and r.score == math.inf


def test_higher_is_better_scores_the_inverse_and_failures_score_infinity():
    objective = Objective("GFLOP/s", True, [metric("GFLOP/s", GFLOPS["GFLOP/s"])])
    fast = objective.evaluate(Result(0, "ok", time_ms=1.0), {})
    slow = objective.evaluate(Result(1, "ok", time_ms=4.0), {})
    assert fast.objective == pytest.approx(4.096e-3) and fast.score == pytest.approx(1 / 4.096e-3)
    assert fast.score < slow.score  # the strategies minimise: the faster one wins
    failed = objective.evaluate(Result(2, "compile_error"), {})
    assert math.isnan(failed.metrics["GFLOP/s"]) and math.isnan(failed.objective) and failed.score == math.inf
    assert objective.score(0.0) == math.inf and objective.score(-3.0) == math.inf
    assert Objective().score(2.5) == 2.5 and Objective().score(math.nan) == math.inf


def test_a_raising_metric_is_nan_with_one_warning_naming_it_and_the_configuration(caplog):
    objective = Objective(
        "ratio", metrics=[metric("ratio", lambda p: 1 / (p["x"] - 1)), metric("after", lambda p: 7.0)]
    )
    with caplog.at_level(logging.WARNING, logger="mpitune.model.objective"):
        r = objective.evaluate(Result(0, "ok", time_ms=1.0), {"x": 1})
    assert math.isnan(r.metrics["ratio"]) and r.metrics["after"] == 7.0 and r.score == math.inf
    [record] = caplog.records
    assert "'ratio'" in record.getMessage() and "{'x': 1}" in record.getMessage()
    assert "ZeroDivisionError" in record.getMessage()


def test_warnings_of_one_metric_stop_after_ten(caplog):
    objective = Objective(metrics=[metric("bad", lambda p: None)])
    with caplog.at_level(logging.WARNING, logger="mpitune.model.objective"):
        for i in range(25):
            objective.evaluate(Result(i, "ok", time_ms=1.0), {"i": i})
    assert len(caplog.records) == 10 and "not reported" in caplog.records[-1].getMessage()


def test_expression_metrics_see_p_then_the_spec_namespace():
    m = expression("bw", "bytes_per_elem * n / time", {"n": 100, "bytes_per_elem": 1})
    assert m.fn({"time": 4.0, "bytes_per_elem": 8}) == 200.0  # p's names come first
    with pytest.raises(SyntaxError):
        expression("bad", "time *", {})


def test_first_mistake_finds_typos_but_not_sample_arithmetic():
    p = sample({"x": 1}, ["power_w"])
    assert p == {"x": 1, "time": 1.0, "time_ms": 1.0, "times": [1.0], "power_w": 1.0}
    assert first_mistake([metric("ok", lambda p: p["power_w"] / (p["x"] - 1))], p) is None
    name, why = first_mistake([metric("a", lambda p: 1.0), metric("b", lambda p: p["a"] + p["tiem"])], p)
    assert name == "b" and why.startswith("KeyError")
    assert first_mistake([metric("s", lambda p: "x")], p)[1].endswith("not a number")


# ------------------------------------------------------------------ real runs

METRICS_SPEC = """
metrics = {"GFLOP/s": lambda p: n / 1e9 / (p["time"] / 1e3),
           "per_step": "time / STEP"}
objective = "GFLOP/s"
objective_higher_is_better = True
"""


@pytest.fixture(scope="module")
def gflops_run(tmp_path_factory):
    """12 configurations of the scale spec tuned for GFLOP/s on 2 ranks: (file, stdout)."""
    tmp = tmp_path_factory.mktemp("gflops")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]}', extra=METRICS_SPEC)
    proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5", proc.stdout


def test_c_run_optimises_gflops_and_the_report_and_strategy_follow(gflops_run):
    out, stdout = gflops_run
    assert "best: GFLOP/s " in stdout
    with h5py.File(out, "r") as f:
        res, metrics = f["results"][...], f["metrics"][...]
        names = json.loads(f["metrics"].attrs["names"])
        recorded = json.loads(f.attrs["objective"])
    assert names == ["GFLOP/s", "per_step"]
    assert recorded["objective"] == "GFLOP/s" and recorded["higher_is_better"] is True
    ok = res["status"] == b"ok"
    assert ok.sum() == 4 and np.isnan(metrics[~ok]).all()
    np.testing.assert_allclose(metrics[ok, 0], N / 1e9 / (res["time_ms"][ok] / 1e3))
    np.testing.assert_allclose(metrics[ok, 1], res["time_ms"][ok] / res["STEP"][ok])
    best = int(np.nanargmax(metrics[:, 0]))
    s = report_json(out)
    assert s["best"]["config_id"] == int(res["config_id"][best])
    assert s["best"]["objective"] == pytest.approx(metrics[best, 0])
    assert s["best"]["metrics"]["GFLOP/s"] == pytest.approx(metrics[best, 0])
    assert s["objective"]["name"] == "GFLOP/s" and s["objective"]["higher_is_better"] is True
    assert [t["objective"] for t in s["top"]] == sorted(metrics[ok, 0], reverse=True)[:5]


def test_resume_with_other_metrics_recomputes_them_for_every_recorded_row(tmp_path):
    spec = write_scale_spec(tmp_path, extra=METRICS_SPEC)
    out = tmp_path / "out.h5"
    assert mpitune(1, [str(spec), "--cache", str(out)], tmp_path).returncode == 0
    write_scale_spec(
        tmp_path,
        extra='metrics = {"GB/s": "8 * n / 1e6 / time"}\nobjective = "GB/s"\nobjective_higher_is_better = True\n',
    )
    proc = mpitune(1, [str(spec), "--cache", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4 already in" in proc.stdout and "0 configurations measured" in proc.stdout
    with h5py.File(out, "r") as f:
        assert json.loads(f["metrics"].attrs["names"]) == ["GB/s"]
        np.testing.assert_allclose(f["metrics"][:, 0], 8 * N / 1e6 / f["results"]["time_ms"])
        assert json.loads(f.attrs["objective"])["objective"] == "GB/s"


KT_WITH_GFLOPS = {
    "device_name": "Test GPU",
    "kernel_name": "k",
    "problem_size": [64],
    "tune_params_keys": ["x"],
    "tune_params": {"x": [1, 2, 3, 4]},
    "objective": "time",
    "cache": {  # GFLOP/s deliberately not 1/time: the replay must follow the recorded values
        "1": {"x": 1, "time": 1.0, "times": [1.0], "GFLOP/s": 10.0, "compile_time": 1.0},
        "2": {"x": 2, "time": 2.0, "times": [2.0], "GFLOP/s": 30.0, "compile_time": 1.0},
        "3": {"x": 3, "time": 3.0, "times": [3.0], "GFLOP/s": 20.0, "compile_time": 1.0},
        "4": {"x": 4, "time": "CompilationFailedConfig", "compile_time": 1.0},
    },
}


def test_replay_exposes_kernel_tuner_metrics_as_observed_values(tmp_path):
    (tmp_path / "kt.json").write_text(json.dumps(KT_WITH_GFLOPS))
    spec = tmp_path / "sim.py"
    spec.write_text(
        'simulation_mode = True\ncache = "kt.json"\nobjective = "GFLOP/s"\n'
        'objective_higher_is_better = True\nmetrics = {"half": lambda p: p["GFLOP/s"] / 2}\n'
    )
    out = tmp_path / "o.h5"
    proc = mpitune(2, [str(spec), "--cache", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = report_json(out)
    assert s["best"]["config"] == {"x": 2} and s["best"]["objective"] == 30.0
    assert s["best"]["observed"] == {"GFLOP/s": 30.0} and s["best"]["metrics"] == {"half": 15.0}
    assert [t["objective"] for t in s["top"]] == [30.0, 20.0, 10.0]


def test_exports_and_analysis_carry_the_metrics_and_the_objective(gflops_run, tmp_path):
    out, _ = gflops_run
    data = read(str(out))
    doc = kt_document(data)
    assert doc["objective"] == "GFLOP/s"
    for entry in doc["cache"].values():
        if entry["MODE"] == 0:  # as Kernel Tuner stores metrics: under their names in each record
            assert entry["GFLOP/s"] == pytest.approx(N / 1e9 / (entry["time"] / 1e3))
        else:
            assert "GFLOP/s" not in entry
    export_t4(str(out), str(tmp_path / "t4.json"))
    t4 = json.loads((tmp_path / "t4.json").read_text())
    assert {tuple(r["objectives"]) for r in t4["results"]} == {("GFLOP/s",)}
    assert sum("GFLOP/s" in [m["name"] for m in r["measurements"]] for r in t4["results"]) == 4
    results, _ = load(str(out))
    assert results.attrs["objective"]["objective"] == "GFLOP/s"
    best = results.loc[results["GFLOP/s"].idxmax()]
    assert int(best["config_id"]) == report_json(out)["best"]["config_id"]
    assert results["per_step"].notna().sum() == 4
