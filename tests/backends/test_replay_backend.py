import pytest
from conftest import kt_cache

from mpitune.backends import replay
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def test_replay_answers_from_data_and_advances_simulated_time(tmp_path):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides())
    backend = replay.create(problem, str(tmp_path))
    timeline = Timeline(Clock(simulated=True))
    r = backend.run(Work(0, {"x": 1, "y": 1}), timeline)
    assert r.status == "ok" and r.time_ms == 2.0 and r.times_ms == (2.1, 2.0, 1.9)
    assert timeline.clock.now() == pytest.approx(0.1 + 0.005 + 0.02)
    assert [p.phase for p in timeline.rows] == ["compile", "verify", "benchmark"]
    failed = backend.run(Work(1, {"x": 2, "y": 1}), timeline)
    assert failed.status == "compile_error"
    assert timeline.clock.now() == pytest.approx(0.125 + 0.05)
    assert backend.run(Work(2, {"x": 9, "y": 9}), timeline).status == "invalid"
    assert "(replayed)" in backend.device_name


def test_real_clock_cannot_be_advanced():
    with pytest.raises(RuntimeError):
        Clock().advance(1.0)
