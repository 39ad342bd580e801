"""Replay problems from measured data, in one process: the ``replay`` verb's and a
``simulation_mode`` spec's."""

from __future__ import annotations

import os

import pytest
from conftest import kt_cache

from mpitune.backends.kernel_cache_reach import LOAD_S
from mpitune.errors import SpecError
from mpitune.model.problem import Schedule
from mpitune.model.replay_clock import RecordedRun
from mpitune.spec.load import load_spec
from mpitune.spec.replay import kernel_cache_assumed, replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def test_the_measured_configurations_are_the_space(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = kt_cache(str(tmp_path / "c.json"))
    problem, settings = replay_problem(measured.load(source), Overrides(max_fevals=3))
    assert (
        problem.kernel.lang == "replay" and problem.kernel.replay.path == source and problem.kernel.kernel_name == "k"
    )
    assert problem.kernel.tune_params == {"x": [1, 2, 3], "y": [1, 2]} and len(problem.configs) == 6
    assert problem.kernel.problem_size == (64, 64) and problem.kernel.iterations == 3
    assert settings.cache_path == str(tmp_path / "c.replay.h5")
    assert (settings.strategy, settings.max_fevals) == ("portfolio", 3)


SIMULATION = """
simulation_mode = True
cache = "measured.json"
restrictions = ["x < 3"]
strategy = "random_sample"
strategy_options = {"seed": 4}
"""


def test_a_simulation_mode_spec_replays_its_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kt_cache(str(tmp_path / "measured.json"))
    spec = tmp_path / "sim.py"
    spec.write_text(SIMULATION)
    problem, settings = load_spec(str(spec), Overrides(), measured.load)
    assert problem.kernel.spec_path == str(spec) and problem.kernel.replay.path == str(tmp_path / "measured.json")
    assert [r.text for r in problem.restrictions] == ["x < 3"]
    assert (settings.strategy, settings.seed) == ("random_sample", 4)
    assert settings.cache_path == str(tmp_path / "sim.replay.h5")
    _, settings = load_spec(str(spec), Overrides(cache_path="out.h5", strategy="brute_force"), measured.load)
    assert settings.cache_path == str(tmp_path / "out.h5") and settings.strategy == "brute_force"


def test_a_simulation_mode_spec_s_schedule_holds_unless_the_command_line_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kt_cache(str(tmp_path / "measured.json"))
    spec = tmp_path / "sim.py"
    spec.write_text(SIMULATION + "schedule = 'refill'\n")
    assert load_spec(str(spec), Overrides(), measured.load)[1].schedule is Schedule.REFILL
    assert load_spec(str(spec), Overrides(schedule="batches"), measured.load)[1].schedule is Schedule.BATCHES
    assert replay_problem(measured.load("measured.json"), Overrides())[1].schedule is Schedule.AUTO
    spec.write_text(SIMULATION + "schedule = 'eager'\n")  # named in the spec, not in the data it replays
    bad = "must be one of 'auto', 'batches', 'refill', got 'eager'"
    with pytest.raises(SpecError, match=f"^{spec}: schedule: {bad}$"):
        load_spec(str(spec), Overrides(), measured.load)


def test_a_simulation_mode_spec_names_its_missing_cache(tmp_path):
    spec = tmp_path / "sim.py"
    spec.write_text(SIMULATION)
    with pytest.raises(SpecError, match=f"^{spec}: cache: file 'measured.json' not found$"):
        load_spec(str(spec), Overrides(), measured.load)
    assert not os.path.exists(tmp_path / "sim.replay.h5")


def test_a_simulation_mode_spec_needs_a_reader_of_measured_data(tmp_path):
    kt_cache(str(tmp_path / "measured.json"))
    spec = tmp_path / "sim.py"
    spec.write_text(SIMULATION)
    with pytest.raises(TypeError, match="read_measured"):
        load_spec(str(spec))


def test_what_compiling_a_candidate_again_costs_follows_the_kernel_cache(tmp_path, monkeypatch):
    """A Kernel Tuner cache does not say what compiling a candidate again costs: shared, it is a
    load; node or off, a compile as long as the recorded one; the replay's line says which. An
    mpitune run's file says it, and is replayed as it recorded."""
    monkeypatch.chdir(tmp_path)
    data = measured.load(kt_cache(str(tmp_path / "c.json")))
    shared = replay_problem(data, Overrides(), kernel_cache="shared")[0].kernel.replay.run
    assert shared.retime_compile_s == LOAD_S and "loaded from the kernel cache" in shared.describe()
    for reach in ("node", "off"):
        run = replay_problem(data, Overrides(), kernel_cache=reach)[0].kernel.replay.run
        assert run.retime_compile_s is None and f"compiled again on each rank: --kernel-cache {reach}" in run.describe()
    monkeypatch.setenv("MPITUNE_KERNEL_CACHE", "off")
    assert "the kernel cache is off" in replay_problem(data, Overrides())[0].kernel.replay.run.describe()
    recorded = RecordedRun(assumptions=())
    assert kernel_cache_assumed(recorded, "shared") is recorded
