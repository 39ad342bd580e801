"""The Pareto front, non-domination ranks, crowding and hypervolume on examples checked by hand."""

import math

import numpy as np
import pytest

from mpitune.model.judging import pareto

# Five points to minimise: (1, 5), (2, 3), (4, 1) are the front; (3, 4) is dominated by (2, 3)
# and (5, 5) by everything; NaN (a failure) is on no front.
POINTS = np.array([[1, 5], [2, 3], [3, 4], [4, 1], [5, 5], [math.nan, 0]], dtype=float)


def test_front_is_the_non_dominated_finite_rows():
    assert pareto.front_mask(POINTS).tolist() == [True, True, False, True, False, False]


def test_equal_points_are_both_on_the_front_and_a_tie_in_one_objective_dominates():
    points = np.array([[1, 2], [1, 2], [1, 3], [2, 2]], dtype=float)
    assert pareto.front_mask(points).tolist() == [True, True, False, False]


def test_ranks_peel_the_fronts_and_failures_come_last():
    assert pareto.front_ranks(POINTS).tolist() == [0, 0, 1, 0, 2, 3]
    # Enough rows for a selection of 3 are on the first front: the rest share the next rank.
    assert pareto.front_ranks(POINTS, enough=3).tolist() == [0, 0, 1, 0, 1, 2]


def test_orientation_negates_higher_is_better_columns():
    values = np.array([[1.0, 8.0], [2.0, 16.0]])
    assert pareto.oriented(values, [False, True]).tolist() == [[1.0, -8.0], [2.0, -16.0]]
    # Time against threads per block, more threads better: (2, 16) is no longer dominated.
    assert pareto.front_mask(pareto.oriented(values, [False, True])).tolist() == [True, True]
    assert pareto.front_mask(pareto.oriented(values, [False, False])).tolist() == [True, False]


def test_front_rows_take_values_with_directions_and_leave_out_what_cannot_be_ranked():
    # (time, GFLOP/s higher is better): row 2 is beaten by row 0; row 3's GFLOP/s of 0 (and row
    # 4's NaN) cannot be ranked, as the strategies score them, so they are on no front.
    values = np.array([[1.0, 50.0], [2.0, 80.0], [3.0, 40.0], [0.5, 0.0], [0.1, math.nan]])
    assert pareto.front_rows(values, [False, True]).tolist() == [0, 1]
    assert pareto.front_rows(values, [False, False]).tolist() == [3]  # lower is better: 0 is the best


def test_crowding_keeps_the_extremes_and_measures_the_gaps():
    front = np.array([[1, 5], [2, 3], [4, 1]], dtype=float)
    # The middle point: neighbours 1 and 4 over a range of 3, and 5 and 1 over a range of 4.
    assert pareto.crowding(front).tolist() == [math.inf, 3 / 3 + 4 / 4, math.inf]


def test_hypervolume_of_a_known_front():
    # Reference (6, 6): the union of [1,6]x[5,6], [2,6]x[3,6] and [4,6]x[1,6] is
    # 5*1 + 4*2 + 2*2 = 17 (slices by the second objective: 5 to 6, 3 to 5, 1 to 3).
    assert pareto.hypervolume(POINTS, [6, 6]) == pytest.approx(17.0)
    # Dominated points, failures and points beyond the reference add nothing.
    assert pareto.hypervolume(POINTS[[0, 1, 3]], [6, 6]) == pytest.approx(17.0)
    assert pareto.hypervolume([[7.0, 0.0]], [6, 6]) == 0.0
    assert pareto.hypervolume(np.zeros((0, 2)), [6, 6]) == 0.0


def test_hypervolume_in_three_dimensions_is_the_union_of_boxes():
    # Two boxes of volume 2x2x1 = 4 and 1x1x2 = 2 ... to reference (2, 2, 2):
    # (0, 0, 1) gives [0,2]x[0,2]x[1,2] = 4; (1, 1, 0) gives [1,2]x[1,2]x[0,2] = 2;
    # they overlap in [1,2]x[1,2]x[1,2] = 1: the union is 5.
    assert pareto.hypervolume([[0, 0, 1], [1, 1, 0]], [2, 2, 2]) == pytest.approx(5.0)


@pytest.mark.parametrize("k", [2, 3])
def test_front_of_many_random_points_matches_the_pairwise_definition(k):
    """Small integers: many ties and duplicates, which the two-objective sweep must get right."""
    points = np.random.default_rng(k).integers(0, 20, (300, k)).astype(float)
    le = (points[:, None, :] <= points[None, :, :]).all(axis=2)
    lt = (points[:, None, :] < points[None, :, :]).any(axis=2)
    dominated = (le & lt).any(axis=0)
    assert pareto.front_mask(points).tolist() == (~dominated).tolist()
