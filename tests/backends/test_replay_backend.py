import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SHARED_DATA, kt_cache

from mpitune.backends import replay
from mpitune.backends.base import Compiled
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Retime, Work
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def test_replay_answers_from_data_and_advances_simulated_time(tmp_path):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides())
    backend = replay.create(problem.kernel, str(tmp_path))
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


def _problem(tmp_path, **bias):
    problem, _ = replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides(seed=4), **bias)
    return problem


def test_bias_scales_every_recorded_time_of_its_rank_exactly(tmp_path):
    problem = _problem(tmp_path, device_bias=(1.0, 1.5))
    plain = replay.create(problem.kernel, str(tmp_path), rank=0).run(Work(0, {"x": 1, "y": 1}), Timeline(Clock(True)))
    timeline = Timeline(Clock(simulated=True))
    biased = replay.create(problem.kernel, str(tmp_path), rank=3).run(Work(0, {"x": 1, "y": 1}), timeline)
    assert plain.times_ms == (2.1, 2.0, 1.9) and plain.time_ms == 2.0
    assert biased.times_ms == (2.1 * 1.5, 2.0 * 1.5, 1.9 * 1.5) and biased.time_ms == 2.0 * 1.5
    assert biased.benchmark_s == pytest.approx(0.02 * 1.5) and biased.compile_s == plain.compile_s
    assert timeline.clock.now() == pytest.approx(0.1 + 0.005 + 0.02 * 1.5)


def test_a_spread_draws_one_factor_per_rank_from_the_seed(tmp_path):
    problem = _problem(tmp_path, device_bias_sd=0.1)
    factors = [replay.bias_factor(problem.kernel.replay, rank) for rank in range(4)]
    assert factors == [replay.bias_factor(problem.kernel.replay, rank) for rank in range(4)]
    assert len(set(factors)) == 4 and all(f > 0 for f in factors)
    assert replay.bias_factor(replace(problem.kernel.replay, seed=5), 0) != factors[0]
    assert replay.bias_factor(replace(problem.kernel.replay, device_bias_sd=0.0), 2) == 1.0
    assert problem.identity().record()["device_bias_sd"] == 0.1
    assert "device_bias_sd" not in _problem(tmp_path).identity().record()


def test_retime_draws_each_launch_from_the_recorded_ones(tmp_path):
    problem = _problem(tmp_path, device_bias=(1.0, 1.1))
    work = (Work(0, {"x": 1, "y": 1}), Work(1, {"x": 1, "y": 2}), Work(2, {"x": 9, "y": 9}), Work(3, {"x": 2, "y": 1}))
    order = Retime(work, rounds=5)
    timeline = Timeline(Clock(simulated=True))
    launches = replay.create(problem.kernel, str(tmp_path), rank=1).retime(order, timeline)
    assert len(launches) == 5 * 4
    assert [x.config_id for x in launches[:8]] == [0, 1, 2, 3, 1, 2, 3, 0]  # round 1 rotated by one
    assert sorted({x.round for x in launches}) == [0, 1, 2, 3, 4]
    by_id = {i: [x.time_ms for x in launches if x.config_id == i] for i in range(4)}
    assert all(t in (2.1 * 1.1, 2.0 * 1.1, 1.9 * 1.1) for t in by_id[0]) and by_id[1] == [1.0 * 1.1] * 5
    assert all(math.isnan(t) for t in by_id[2] + by_id[3])  # not in the data; a compile error
    again = replay.create(problem.kernel, str(tmp_path), rank=1).retime(order, Timeline(Clock(simulated=True)))
    assert [x.time_ms for x in again] == [x.time_ms for x in launches]
    # The compiles of the candidates in the data (the one that failed too), each one's loading and
    # warm-up (one launch, its first recorded on this rank's device: a Kernel Tuner cache's
    # verification of 5 ms checked the answer on the host too), then the launches.
    expected_s = 0.1 + 0.2 + 0.05 + (2.1 + 1.0) * 1.1 / 1000 + (sum(by_id[0]) + sum(by_id[1])) / 1000
    assert timeline.clock.now() == pytest.approx(expected_s)
    assert [(row.phase, row.config_id) for row in timeline.rows] == [("compile", -1), ("confirm", -1)]
    assert timeline.rows[0].end_s == pytest.approx(0.1 + 0.2 + 0.05)  # the compiles first, as a backend does


def test_an_order_retimed_again_is_timed_anew_and_a_replay_repeats_itself(tmp_path):
    """The calibration times one reference batch after batch: a second time is new launches, as
    on a device, not a copy of the first (which the statistics would count as more evidence)."""
    problem = _problem(tmp_path)
    order = Retime((Work(0, {"x": 1, "y": 1}),), rounds=20)
    backend = replay.create(problem.kernel, str(tmp_path))
    first, second = ([x.time_ms for x in backend.retime(order, Timeline(Clock(True)))] for _ in range(2))
    assert first != second and set(first + second) <= {2.1, 2.0, 1.9}
    again = replay.create(problem.kernel, str(tmp_path))
    assert [[x.time_ms for x in again.retime(order, Timeline(Clock(True)))] for _ in range(2)] == [first, second]


def test_retime_compiles_only_what_was_not_compiled_ahead(tmp_path):
    problem = _problem(tmp_path)
    order = Retime((Work(0, {"x": 1, "y": 2}),), rounds=2)
    timeline = Timeline(Clock(simulated=True))
    launches = replay.create(problem.kernel, str(tmp_path)).retime(order, timeline, {0: Compiled(0)})
    assert [x.time_ms for x in launches] == [1.0, 1.0]
    assert timeline.clock.now() == pytest.approx(0.001 + 0.002)  # its loading and warm-up, its launches


def test_a_candidate_timed_again_is_warmed_up_as_its_source_verified_it(tmp_path):
    """An mpitune run verifies on the device (a launch and a compare): its recorded verification
    stands for the loading and warm-up launch. Kernel Tuner's also checks the answer on the host,
    which timing a candidate again does not repeat: one launch stands for it, never more than the
    verification."""
    problem = _problem(tmp_path)
    assert problem.kernel.replay is not None and problem.kernel.replay.run.host_verified
    assert "warm-up is charged as one launch" in problem.kernel.replay.run.describe()
    order = Retime((Work(0, {"x": 1, "y": 1}),), rounds=1)
    charged = {}
    for host_verified in (True, False):
        run = replace(problem.kernel.replay.run, host_verified=host_verified)
        timeline = Timeline(Clock(simulated=True))
        launches = replay.create(
            replace(problem.kernel, replay=replace(problem.kernel.replay, run=run)), str(tmp_path)
        ).retime(order, timeline, {0: Compiled(0)})
        charged[host_verified] = timeline.clock.now() - launches[0].time_ms / 1000
    assert charged == {True: pytest.approx(0.0021), False: pytest.approx(0.005)}


def test_a_rounds_launches_come_from_one_place_in_every_candidates_recorded_run(tmp_path):
    """Recorded launches are in the order they were timed: a round takes every candidate's from
    the same place, so a device's drift (a clock that stepped partway) hits them alike."""
    entries = {
        f"{x}": {"x": x, "time": 10.0 * x, "times": [10.0 * x * (1 + i) for i in range(8)], "compile_time": 1.0}
        for x in (1, 2)
    }
    doc = {"device_name": "d", "kernel_name": "k", "problem_size": [8], "tune_params_keys": ["x"]}
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({**doc, "tune_params": {"x": [1, 2]}, "objective": "time", "cache": entries}))
    problem, _ = replay_problem(measured.load(str(path)), Overrides(seed=2))
    launches = replay.create(problem.kernel, str(tmp_path)).retime(
        Retime((Work(0, {"x": 1}), Work(1, {"x": 2})), 12), Timeline(Clock(True))
    )
    for r in range(12):
        one, two = sorted((x.config_id, x.time_ms) for x in launches if x.round == r)
        assert two[1] == 2 * one[1]  # the same place: candidate 1's launch is twice candidate 0's
    assert len({x.time_ms for x in launches if x.config_id == 0}) > 1  # and the places vary


def test_ranks_of_several_files_replay_each_its_own_device_model(tmp_path):
    """``replay A100 A4000``: world rank r replays file r % 2, its device name and its times alike,
    so the job's ranks look like two device models."""
    caches = SHARED_DATA / "caches"
    paths = [str(caches / f"convolution_{model}.json.gz") for model in ("A100", "A4000")]
    if not all(Path(p).is_file() for p in paths):
        pytest.skip(f"needs the shared caches in {caches}")
    data = [measured.load(p) for p in paths]
    problem, _ = replay_problem(data[0], Overrides(seed=1), more=data[1:])
    names = list(problem.kernel.tune_params)
    lookups = [d.lookup() for d in data]
    config = next(c for c in data[0].configs if all(lk[c].status == "ok" and len(lk[c].times_ms) > 1 for lk in lookups))
    work = Work(0, dict(zip(names, config)))
    backends = [replay.create(problem.kernel, str(tmp_path), rank=r) for r in range(3)]
    assert [b.device_name for b in backends] == [f"{d.device_name} (replayed)" for d in (*data, data[0])]
    assert data[0].device_name != data[1].device_name
    results = [b.run(work, Timeline(Clock(simulated=True))) for b in backends]
    recorded = [lk[config] for lk in (*lookups, lookups[0])]
    assert [r.time_ms for r in results] == [m.time_ms for m in recorded]
    assert [r.compile_s for r in results] == [m.compile_s for m in recorded]
    assert results[0].time_ms != results[1].time_ms
    # Timed again, a rank draws its launches from its own file's recorded ones.
    launches = backends[1].retime(Retime((work,), rounds=4), Timeline(Clock(simulated=True)))
    assert {x.time_ms for x in launches} <= set(recorded[1].times_ms)
