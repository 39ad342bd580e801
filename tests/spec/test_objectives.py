"""Several objectives in a spec, Kernel Tuner's way: ``objective`` a list of names and
``objective_higher_is_better`` a list of directions; a single objective loads as before."""

from __future__ import annotations

import math

import pytest
from test_load import GOOD, write

from mpitune.errors import SpecError
from mpitune.model.objective import Objective
from mpitune.model.result import Result
from mpitune.spec.load import load_spec

TWO = "objective = ['time', 'threads']\n"
HIB = "objective_higher_is_better = "
THREADS = "metrics = {'threads': 'STEP * 32', 'GFLOP/s': lambda p: n / 1e9 / (p['time'] / 1e3)}\n"


def test_a_list_of_objectives_loads_with_one_direction_each(tmp_path):
    spec = write(tmp_path, GOOD + THREADS + TWO + HIB + "[False, True]\n")
    problem, _ = load_spec(str(spec))
    assert problem.aim.names == ("time", "threads") and problem.aim.directions == (False, True)
    assert problem.aim.goal.name == "time" and problem.aim.goal.higher_is_better is False  # the first
    objective = Objective.of(problem.aim, problem.kernel.observed_names, problem.kernel.observed_aliases)
    r = objective.evaluate(Result(0, "ok", time_ms=2.0, times_ms=[2.0]), {"STEP": 4, "MODE": 0})
    assert r.scores == (2.0, 1 / 128) and r.score == 2.0 and r.objective == 2.0
    assert not objective.is_kernel_time  # racing off: a slow configuration may be on the front
    failed = objective.evaluate(Result(1, "compile_error"), {"STEP": 4, "MODE": 0})
    assert failed.scores == (math.inf, math.inf)


def test_without_directions_every_objective_is_lower_is_better(tmp_path):
    problem, _ = load_spec(str(write(tmp_path, GOOD + THREADS + "objective = ['threads', 'time']\n")))
    assert problem.aim.names == ("threads", "time") and problem.aim.directions == (False, False)


def test_a_single_objective_is_unchanged_also_as_a_list_of_one(tmp_path):
    problem, _ = load_spec(str(write(tmp_path, GOOD + THREADS + "objective = 'GFLOP/s'\n" + HIB + "True\n")))
    assert (problem.aim.names, problem.aim.directions) == (("GFLOP/s",), (True,))
    record = Objective.of(problem.aim).record()
    assert "objectives" not in record  # files of one objective stay as they were
    problem, _ = load_spec(str(write(tmp_path, GOOD + THREADS + "objective = ['GFLOP/s']\n" + HIB + "[True]\n")))
    assert (problem.aim.names, problem.aim.directions) == (("GFLOP/s",), (True,))


BROKEN = [
    ("objective = ['time', 'energy']\n", "objective", "'energy' is neither 'time' nor a metric"),
    ("objective = ['time', 'time']\n", "objective", "'time' is named twice"),
    ("objective = []\n", "objective", "empty list"),
    (TWO + HIB + "[False]\n", "objective_higher_is_better", "list of 2"),
    (TWO + HIB + "True\n", "objective_higher_is_better", "list of 2"),
    (TWO + HIB + "[False, 'yes']\n", "objective_higher_is_better", "'yes'"),
]


@pytest.mark.parametrize("change,field,phrase", BROKEN, ids=[str(i) for i in range(len(BROKEN))])
def test_bad_objectives_are_refused_in_one_line_naming_the_field(tmp_path, change, field, phrase):
    spec = write(tmp_path, GOOD + THREADS + change)
    with pytest.raises(SpecError) as err:
        load_spec(str(spec))
    message = str(err.value)
    assert message.startswith(str(spec)) and f": {field}:" in message and phrase in message
    assert "\n" not in message
