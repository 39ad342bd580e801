"""The portable rule (model/portable.py): the candidates a job of several device models times on
every model at its end, ranked as the portable choice is."""

from __future__ import annotations

import math

import numpy as np

from mpitune.model.portable import portable, ranked_candidates

NAN = math.nan


def test_candidates_measured_on_every_model_come_first_by_their_worst_ratio():
    a = np.array([1.0, 1.1, 2.0, 1.05, NAN, 1.0])
    b = np.array([3.0, 2.0, 2.0, 2.4, 2.0, NAN])
    # Worst ratios where both measured: id 0: 1.5, id 1: 1.1, id 2: 2.0, id 3: 1.2.
    assert ranked_candidates([a, b], 3) == [1, 3, 0]
    assert ranked_candidates([b, a], 3) == [1, 3, 0]  # the models' order changes nothing
    # Then those one model lacks, by their worst ratio where measured (id 5 at 1.0, id 4 at 1.0): by id.
    assert ranked_candidates([a, b], 10) == [1, 3, 0, 2, 4, 5]


def test_the_first_of_the_candidates_is_the_portable_choice():
    rng = np.random.default_rng(3)
    times = [rng.uniform(1.0, 3.0, 40) for _ in range(3)]
    for t in times:
        t[rng.choice(40, 8, replace=False)] = NAN  # not measured there
    values = {m: {str(i): float(t[i]) for i in range(40) if math.isfinite(t[i])} for m, t in enumerate(times)}
    found = portable(values, higher_is_better=False)
    assert found is not None
    assert ranked_candidates(times, 1) == [int(found.key)]


def test_failed_and_unmeasured_configurations_are_no_candidates():
    a = np.array([NAN, 2.0, NAN])
    b = np.array([NAN, NAN, NAN])  # a model that measured nothing that passed
    assert ranked_candidates([a, b], 5) == [1]
    assert ranked_candidates([b, b], 5) == []
