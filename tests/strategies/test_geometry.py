"""The space queries strategies share (mpitune/strategies/geometry.py), against plain
reference computations."""

import math

import numpy as np
import pytest

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import geometry

# Larger than one block of nearest_unseen's scan, so that the answer must survive the blocks. Its unit
# coordinates are multiples of 1/64 and the test points multiples of 1/1024, so every distance is exact
# and ties are real ties, whatever the order of the arithmetic.
BIG = SearchSpace.build({"a": list(range(65)), "b": list(range(33)), "c": list(range(33))})
SMALL = SearchSpace.build({"a": [1, 2, 4, 8], "b": [16, 32, 64], "c": ["x", "y"]})


def reference_nearest(space: SearchSpace, unseen: np.ndarray, points: np.ndarray) -> list[int]:
    """Every point against every unseen configuration, in point order, ties by the lowest id."""
    coords = space.unit_coordinates(np.arange(len(space)))
    taken: list[int] = []
    for p in points[: int(unseen.sum())]:
        dist = ((coords - p) ** 2).sum(1)
        dist[~unseen] = np.inf
        dist[taken] = np.inf
        taken.append(int(np.argmin(dist)))  # argmin: the first, so the lowest id, of equal distances
    return taken


@pytest.mark.parametrize("seed", [0, 1])
def test_nearest_unseen_is_the_full_scan_across_blocks(seed):
    assert len(BIG) > geometry.NEAREST_BLOCK
    rng = np.random.default_rng(seed)
    unseen = rng.random(len(BIG)) < 0.3
    # Points on the grid, halfway between values in every parameter (eight-way ties), and off it
    # crowding one spot.
    halfway = np.tile([32.5 / 64, 16.5 / 32, 16.5 / 32], (4, 1))
    crowd = np.round(np.clip(rng.normal(0.9, 0.01, (6, 3)), 0, 1) * 1024) / 1024
    points = np.concatenate([BIG.unit_coordinates(rng.choice(len(BIG), 4)), halfway, crowd])
    got = geometry.nearest_unseen(BIG, unseen, points)
    assert got == reference_nearest(BIG, unseen, points)
    assert len(set(got)) == len(points) and unseen[got].all()


def test_nearest_unseen_far_from_anything_unseen_scans_and_still_gives_the_full_scan(monkeypatch):
    """Unseen configurations only in one corner: points at the other end, and outside the space,
    are beyond any ball the search may draw (at most 4,096 cells here, a space of 70,785), so the
    scan answers them; a point near the corner is answered by its ball; the answers together are
    the full scan's, each taken once."""
    monkeypatch.setattr(geometry, "LOCAL_CELLS", 4096)
    unseen = np.zeros(len(BIG), dtype=bool)
    corner = np.flatnonzero((BIG.indices[:, 0] >= 60) & (BIG.indices[:, 1] >= 30))
    unseen[corner] = True
    far = np.array([[0.0, 0.0, 0.0], [-0.25, 0.5, 1.25], [0.5, 0.5, 0.5]])
    near = BIG.unit_coordinates(corner[:3]) + 1 / 1024
    points = np.concatenate([far, near, far])
    assert geometry._near(BIG, unseen, far[0], set()) is None  # the scan, not the ball, answers it
    got = geometry.nearest_unseen(BIG, unseen, points)
    assert got == reference_nearest(BIG, unseen, points)
    assert len(set(got)) == len(points) and unseen[got].all()


@pytest.mark.parametrize("seed", [2, 3])
def test_the_ball_and_the_scan_name_the_same_configuration(seed):
    """Off-grid points, where distances are not exact: the ball's answer for each point is the
    scan's, to the last bit of every distance compared."""
    rng = np.random.default_rng(seed)
    unseen = rng.random(len(BIG)) < 0.02
    for point in rng.random((20, 3)) * 1.2 - 0.1:
        scanned = geometry._scanned(BIG, unseen, point[None, :])[0]
        for start in (0, 3):  # any first level gives the same answer
            near = geometry._near(BIG, unseen, point, set(), start)
            assert near is not None and near[0] == scanned


def test_nearest_unseen_gives_at_most_what_is_unseen():
    unseen = np.zeros(len(SMALL), dtype=bool)
    unseen[[3, 7]] = True
    assert sorted(geometry.nearest_unseen(SMALL, unseen, np.zeros((5, 3)))) == [3, 7]
    assert geometry.nearest_unseen(SMALL, np.zeros(len(SMALL), dtype=bool), np.zeros((2, 3))) == []


def test_first_unseen_keeps_the_order_and_skips_seen_and_repeated_ids():
    assert geometry.first_unseen(np.array([5, 1, 5, 2, 9, 3]), {1}, 3) == [5, 2, 9]
    assert geometry.first_unseen([4, 4], set(), 0) == []


def test_scan_stops_after_the_last_id_it_takes():
    order = np.array([7, 3, 5, 1, 0])
    assert geometry.scan(order, 0, {3}, 2) == ([7, 5], 3)
    assert geometry.scan(order, 3, set(), 5) == ([1, 0], 5)
    assert geometry.scan(range(4), 4, set(), 2) == ([], 4)


def test_best_puts_failures_last_and_breaks_ties_by_id():
    values = {4: 2.0, 1: math.inf, 3: 1.0, 0: 2.0, 2: math.inf}
    assert geometry.best(values, 4) == [3, 0, 4, 1]
    assert geometry.best({}, 3) == []


def test_the_space_filling_design_is_seeded_distinct_and_avoids_what_is_seen():
    seen = set(range(0, len(SMALL), 2))
    a = geometry.space_filling(SMALL, seen, np.random.default_rng(3), 4)
    assert a == geometry.space_filling(SMALL, seen, np.random.default_rng(3), 4)
    assert len(set(a)) == 4 and not set(a) & seen
    rest = geometry.space_filling(SMALL, seen, np.random.default_rng(3), 100)
    assert sorted(rest) == sorted(set(range(len(SMALL))) - seen)  # more than is left: all that is left
    assert geometry.space_filling(SMALL, set(range(len(SMALL))), np.random.default_rng(3), 2) == []


def test_seen_mask_marks_exactly_the_seen_ids():
    assert np.flatnonzero(geometry.seen_mask(len(SMALL), {0, 5, 23})).tolist() == [0, 5, 23]
    assert not geometry.seen_mask(len(SMALL), set()).any()
