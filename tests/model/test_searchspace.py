import itertools

import numpy as np

from mpitune.model.restrictions import Restriction
from mpitune.model.searchspace import SearchSpace

PARAMS = {"a": [1, 2, 4, 8], "b": [16, 32, 64], "c": ["x", "y"]}


def test_ids_follow_cartesian_order_and_restrictions():
    rs = [Restriction("a * b <= 128", list(PARAMS)), lambda cfg: not (cfg["c"] == "y" and cfg["a"] == 1)]
    space = SearchSpace.build(PARAMS, rs)
    expected = [
        dict(zip(PARAMS, v))
        for v in itertools.product(*PARAMS.values())
        if v[0] * v[1] <= 128 and not (v[2] == "y" and v[0] == 1)
    ]
    assert [space.config(i) for i in range(len(space))] == expected


def test_unrestricted_space_is_the_full_product():
    space = SearchSpace.build(PARAMS)
    assert len(space) == 24
    assert space.config(0) == {"a": 1, "b": 16, "c": "x"}
    assert space.config(23) == {"a": 8, "b": 64, "c": "y"}


def test_same_problem_gives_same_ids():
    rs = [Restriction("a != 2", list(PARAMS))]
    assert np.array_equal(SearchSpace.build(PARAMS, rs).indices, SearchSpace.build(PARAMS, rs).indices)


def test_restriction_removing_everything_gives_empty_space():
    assert len(SearchSpace.build(PARAMS, [Restriction("a > 100", list(PARAMS))])) == 0


def test_space_from_measured_configs_keeps_cartesian_ids():
    space = SearchSpace.from_configs(PARAMS, [(8, 64, "y"), (1, 16, "x"), (2, 32, "x"), (1, 16, "x")])
    assert len(space) == 3
    assert [space.config(i) for i in range(3)] == [
        {"a": 1, "b": 16, "c": "x"},
        {"a": 2, "b": 32, "c": "x"},
        {"a": 8, "b": 64, "c": "y"},
    ]
