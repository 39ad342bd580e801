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


def test_a_space_too_large_to_enumerate_is_refused_before_its_table_is_made():
    import tracemalloc

    import pytest

    from mpitune.model.searchspace import MAX_CONFIGURATIONS, SpaceTooLarge, too_large

    params = {f"p{i}": list(range(10)) for i in range(10)}
    tracemalloc.start()
    try:
        with pytest.raises(SpaceTooLarge, match=r"has 10,000,000,000 configurations \(10 x 10 x .* x 10 values\)"):
            SearchSpace.build(params)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20  # refused, not a MemoryError
    finally:
        tracemalloc.stop()
    assert too_large([10] * 9) is None and MAX_CONFIGURATIONS == 10**9
