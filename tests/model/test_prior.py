"""Putting a prior's times on this space's ids: shared parameters, partly shared values."""

import math

import numpy as np
import pytest

from mpitune.model.prior import NothingShared, align
from mpitune.model.searchspace import SearchSpace

SPACE = SearchSpace.build({"a": [1, 2, 4], "b": [8, 16]})


def test_matches_on_shared_parameters_and_takes_the_best_of_the_dropped_ones() -> None:
    shared, time_ms = align(SPACE, {"b": [16, 32], "c": [0, 1]}, [(16, 0), (16, 1), (32, 0)], [3.0, 2.0, 1.0])
    assert shared == ("b",)
    b = np.array([SPACE.config(i)["b"] for i in range(len(SPACE))])
    assert np.all(time_ms[b == 16] == 2.0)  # the best of (16, 0) and (16, 1)
    assert np.all(np.isnan(time_ms[b == 8]))  # a value the prior never had


def test_failed_configurations_give_no_time() -> None:
    _, time_ms = align(SPACE, {"a": [1, 2], "b": [8, 16]}, [(1, 8), (2, 8)], [math.nan, 5.0])
    assert math.isnan(time_ms[0]) and time_ms[2] == 5.0  # ids 0: (1, 8); 2: (2, 8)


@pytest.mark.parametrize(
    ("params", "configs", "times"),
    [({"z": [1]}, [(1,)], [1.0]), ({"a": [3]}, [(3,)], [1.0]), ({"a": [1]}, [(1,)], [math.inf])],
)
def test_a_prior_with_nothing_in_common_is_refused(params, configs, times) -> None:
    with pytest.raises(NothingShared):
        align(SPACE, params, configs, times)
