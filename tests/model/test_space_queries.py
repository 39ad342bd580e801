"""The search space queries strategies rely on: id lookup, neighbours, unit coordinates."""

import itertools

import numpy as np

from mpitune.model.restrictions import Restriction
from mpitune.model.searchspace import SearchSpace

PARAMS = {"a": [1, 2, 4, 8], "b": [16, 32, 64], "c": ["x", "y"]}
SPACE = SearchSpace.build(PARAMS, [Restriction("a * b <= 128", list(PARAMS))])


def test_id_of_inverts_the_index_matrix_and_rejects_the_rest():
    assert list(SPACE.id_of(SPACE.indices)) == list(range(len(SPACE)))
    removed = [2, 2, 0]  # a=4, b=64: restricted away
    assert list(SPACE.id_of([removed, [9, 0, 0], [0, -1, 0]])) == [-1, -1, -1]


def test_id_of_on_a_space_of_measured_configs():
    space = SearchSpace.from_configs(PARAMS, [(8, 64, "y"), (1, 16, "x")])
    assert list(space.id_of([[3, 2, 1], [0, 0, 0], [0, 0, 1]])) == [1, 0, -1]


def test_neighbours_differ_in_exactly_one_parameter():
    rows = SPACE.indices.astype(int)
    for i in range(len(SPACE)):
        expected = [j for j in range(len(SPACE)) if (rows[i] != rows[j]).sum() == 1]
        assert sorted(SPACE.neighbours(i)) == expected
        adjacent = [j for j in expected if np.abs(rows[i] - rows[j]).sum() == 1]
        assert sorted(SPACE.neighbours(i, adjacent=True)) == adjacent


def test_unit_coordinates_span_zero_to_one():
    space = SearchSpace.build(PARAMS)
    unit = space.unit_coordinates(np.arange(len(space)))
    assert unit.min() == 0 and unit.max() == 1
    assert [tuple(r) for r in unit[:2]] == [(0, 0, 0), (0, 0, 1)]


def test_huge_products_fall_back_to_a_dictionary():
    params = {f"p{i}": list(range(100)) for i in range(12)}  # 1e24 > int64
    configs = [tuple(itertools.repeat(v, 12)) for v in (3, 7)]
    space = SearchSpace.from_configs(params, configs)
    assert list(space.id_of([[7] * 12, [3] * 12, [5] * 12])) == [1, 0, -1]
    assert list(space.neighbours(0)) == []
