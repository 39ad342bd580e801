"""Racing on replayed measured data: the recorded launches in order, the simulated time of the
launches made only, and the best configuration the same as with full timing."""

import importlib.util

import pytest
from conftest import REPO, kt_cache

from mpitune.backends import replay
from mpitune.model.racing import Race
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def benchmark():
    """benchmarks/racing.py, whose replays the test checks."""
    spec = importlib.util.spec_from_file_location("racing_benchmark", REPO / "benchmarks" / "racing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_races_the_recorded_launches_in_order_and_spends_only_their_time(tmp_path):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides())
    backend = replay.create(problem, str(tmp_path))
    timeline = Timeline(Clock(simulated=True))
    r = backend.run(Work(0, {"x": 1, "y": 1}), timeline, race=Race(best_ms=1.0, ratio=1.3))  # times 2.1, 2.0, 1.9
    assert r.status == "ok" and r.raced and r.times_ms == (2.1, 2.0) and r.time_ms == pytest.approx(2.05)
    assert r.benchmark_s == pytest.approx(2 * 0.02 / 3)
    assert timeline.clock.now() == pytest.approx(0.1 + 0.005 + 2 * 0.02 / 3)
    full = backend.run(Work(0, {"x": 1, "y": 1}), Timeline(Clock(simulated=True)), race=Race(best_ms=2.0, ratio=1.3))
    assert not full.raced and full.times_ms == (2.1, 2.0, 1.9) and full.time_ms == 2.0 and full.benchmark_s == 0.02


CACHES = ["pnpoly_RTX_3090.json.gz", "convolution_A4000.json.gz"]


@pytest.mark.parametrize("name", CACHES)
def test_racing_finds_the_best_of_full_timing_on_real_caches_in_less_time(tmp_path, name, shared_caches):
    replayed = benchmark().replayed
    source = str(shared_caches / name)
    full = replayed(source, str(tmp_path / "full.h5"), False, "brute_force", None)
    exact = replayed(source, str(tmp_path / "raced.h5"), True, "brute_force", None)
    spread = replayed(source, str(tmp_path / "spread.h5"), "spread", "brute_force", None)
    for raced in (exact, spread):
        assert (raced["best"], raced["best_ms"]) == (full["best"], full["best_ms"])
        assert raced["configs"] == full["configs"] and raced["raced"] > 0
        assert raced["benchmark_s"] < 0.8 * full["benchmark_s"] and raced["launches"] < full["launches"]
    assert spread["launches"] < exact["launches"]  # stopping on one launch saves more than on a majority
