"""Racing on replayed measured data: the recorded launches in order (the first standing in for
the verified launch), the simulated time of the launches made only, the best configuration the
same as with full timing, and the raced configurations that stopped near the bound confirmed."""

import importlib.util

import numpy as np
import pytest
from conftest import REPO, kt_cache

from mpitune.backends import replay
from mpitune.model.judging.candidates import NEAR_BOUND
from mpitune.model.judging.racing import Race, RaceRule
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured
from mpitune.store.reader import read


def benchmark():
    """benchmarks/racing.py, whose replays the test checks."""
    spec = importlib.util.spec_from_file_location("racing_benchmark", REPO / "benchmarks" / "racing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_races_the_recorded_launches_in_order_and_spends_only_their_time(tmp_path):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides())
    backend = replay.create(problem.kernel, str(tmp_path))
    timeline = Timeline(Clock(simulated=True))
    majority = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.MAJORITY)
    r = backend.run(Work(0, {"x": 1, "y": 1}), timeline, race=majority)  # times 2.1, 2.0, 1.9
    assert r.status == "ok" and r.raced and r.times_ms == (2.1, 2.0) and r.time_ms == pytest.approx(2.05)
    assert r.benchmark_s == pytest.approx(2 * 0.02 / 3)
    assert timeline.clock.now() == pytest.approx(0.1 + 0.005 + 2 * 0.02 / 3)
    full = backend.run(Work(0, {"x": 1, "y": 1}), Timeline(Clock(simulated=True)), race=Race(best_ms=2.0, ratio=1.3))
    assert not full.raced and full.times_ms == (2.1, 2.0, 1.9) and full.time_ms == 2.0 and full.benchmark_s == 0.02
    assert full.first_ms == 2.1  # the first recorded launch stands in for the verified one


def test_the_default_race_stops_on_the_first_recorded_launch_and_spends_no_benchmark_time(tmp_path):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides())
    backend = replay.create(problem.kernel, str(tmp_path))
    timeline = Timeline(Clock(simulated=True))
    r = backend.run(Work(0, {"x": 1, "y": 1}), timeline, race=Race(best_ms=1.0))  # first launch 2.1 > 1.1 x 1.0
    assert r.status == "ok" and r.raced and r.times_ms == (2.1,) and r.time_ms == 2.1 and r.first_ms == 2.1
    assert r.benchmark_s == 0.0 and timeline.clock.now() == pytest.approx(0.1 + 0.005)  # compile and verify only
    near = Race(best_ms=2.0)  # first launch 2.1 < 1.1 x 2.0
    kept = backend.run(Work(0, {"x": 1, "y": 1}), Timeline(Clock(simulated=True)), race=near)
    assert not kept.raced and kept.times_ms == (2.1, 2.0, 1.9) and kept.benchmark_s == 0.02


CACHES = ["pnpoly_RTX_3090.json.gz", "convolution_A4000.json.gz"]


@pytest.mark.parametrize("name", CACHES)
def test_racing_finds_the_best_of_full_timing_on_real_caches_in_less_time(tmp_path, name, shared_caches):
    replayed = benchmark().replayed
    source = str(shared_caches / name)
    full = replayed(source, str(tmp_path / "full.h5"), False, "brute_force", None)
    exact = replayed(source, str(tmp_path / "majority.h5"), "majority", "brute_force", None)
    spread = replayed(source, str(tmp_path / "spread.h5"), "spread", "brute_force", None)
    first = replayed(source, str(tmp_path / "first.h5"), True, "brute_force", None)  # the default
    for raced in (exact, spread, first):
        assert (raced["best"], raced["best_ms"]) == (full["best"], full["best_ms"])
        assert raced["configs"] == full["configs"] and raced["raced"] > 0
        assert raced["benchmark_s"] < 0.8 * full["benchmark_s"] and raced["launches"] < full["launches"]
    assert spread["launches"] < exact["launches"]  # stopping on one launch saves more than on a majority
    # Stopping on the verified launch stops the same configurations as the spread rule on the
    # first timed one (the first recorded launch stands in for both), with no timed launch.
    assert first["raced"] == spread["raced"] and first["benchmark_s"] < spread["benchmark_s"]
    rows = read(str(tmp_path / "first.h5")).results
    stopped = rows[(rows["status"] == "ok") & (rows["raced"] == 1)]
    assert (stopped["launches"] == 1).all() and (stopped["benchmark_s"] == 0).all()  # its one time: the first launch
    assert (stopped["time_ms"] == stopped["times_ms"][:, 0]).all()
    assert len(stopped) > 0.5 * int((rows["status"] == "ok").sum())  # most configurations


@pytest.mark.parametrize("name", CACHES)
def test_the_confirmation_takes_raced_configurations_that_stopped_near_the_bound(tmp_path, name, shared_caches):
    """Many configurations of a real space stop just beyond R x the best: the nearest of them are
    timed again with the best, as the race alone could not tell them apart by much."""
    out = tmp_path / "first.h5"
    benchmark().replayed(str(shared_caches / name), str(out), True, "brute_force", None)
    data = read(str(out))
    rows, confirmed = data.results, set(data.confirmed["config_id"].tolist())
    ok = rows[rows["status"] == "ok"]
    full = ok[ok["raced"] == 0]
    best_ms = float(full["time_ms"].min())
    times = np.where(np.isnan(full["times_ms"]), -np.inf, full["times_ms"])
    ratio = max(1.3, float((times.max(axis=1) / full["time_ms"]).max()))  # rows keep no first launch
    near = ok[(ok["raced"] == 1) & (ok["time_ms"] <= NEAR_BOUND * ratio * best_ms)]
    assert len(near) > 0
    joined = confirmed & set(near["config_id"].tolist())
    assert joined and len(joined) <= 5  # the nearest k (5) of them
    assert int(full["config_id"][np.argmin(full["time_ms"])]) in confirmed
