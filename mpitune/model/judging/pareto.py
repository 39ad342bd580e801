"""The Pareto front of a run with several objectives, and the hypervolume that scores one.

One definition serves every consumer. The run records the front it computes here from its
stored results. ``report``, ``plot`` and the HTML report compute it here from a file. The NSGA-II
strategy ranks its population here, and the benchmark scores fronts here. Every function takes
points as an (n, k) array of objective values, each **to minimise**. ``oriented`` turns values
with their directions into that. A row with any non-finite value means "no value": a failed
configuration. Such rows are never on a front and rank last.

Point a dominates point b when a is no worse in every objective and better in one. Equal points
do not dominate each other, so configurations with the same values are all on the front.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def oriented(values: np.ndarray, higher_is_better: Sequence[bool]) -> np.ndarray:
    """``values`` (n, k) with each higher-is-better column negated: all to minimise.

    Negation, not ``1 / value``, keeps hypervolumes in the objectives' own units (a linear scale)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1, len(higher_is_better))
    return np.where(np.asarray(higher_is_better, dtype=bool), -values, values)


def front_rows(values: np.ndarray, higher_is_better: Sequence[bool]) -> np.ndarray:
    """The rows of ``values`` on the Pareto front for those directions, ascending.

    ``values`` has n rows and one column per objective, NaN where a configuration has no value.
    The front is what a run records, and what report, plot and the HTML report show. A
    higher-is-better value must be positive to count, as for the score strategies minimise
    (model/objective.py). A row with one that is not is on no front, like a failure."""
    values = np.asarray(values, dtype=np.float64).reshape(-1, len(higher_is_better))
    points = oriented(values, higher_is_better)
    with np.errstate(invalid="ignore"):
        unrankable = (np.asarray(higher_is_better, dtype=bool) & ~(values > 0)).any(axis=1)
    points[unrankable] = np.nan
    return np.flatnonzero(front_mask(points))


def front_mask(points: np.ndarray) -> np.ndarray:
    """True for the rows on the front (non-dominated among the finite rows)."""
    ranks = front_ranks(points, enough=1)
    front: np.ndarray = ranks == 0
    return front


def front_ranks(points: np.ndarray, enough: int | None = None) -> np.ndarray:
    """The non-domination rank of every row: 0 for the front, 1 for the front of the rest, ...

    This is NSGA-II's fast non-dominated sorting, by peeling. With ``enough``, peeling stops once
    that many rows are ranked. The rest get the next rank, as a selection of ``enough`` needs no
    more. Non-finite rows get the rank after every finite one."""
    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    finite = np.isfinite(points).all(axis=1) if points.ndim == 2 else np.zeros(n, bool)
    ranks = np.full(n, n, dtype=np.int64)
    left = np.flatnonzero(finite)
    rank = 0
    wanted = len(left) if enough is None else min(enough, len(left))
    ranked = 0
    while len(left) and ranked < wanted:
        on_front = left[_non_dominated(points[left])]
        ranks[on_front] = rank
        ranked += len(on_front)
        left = np.setdiff1d(left, on_front, assume_unique=True)
        rank += 1
    if len(left):  # not peeled: after every front that was
        ranks[left] = rank
        rank += 1
    ranks[~finite] = rank
    return ranks


def _non_dominated(points: np.ndarray) -> np.ndarray:
    """Positions of the non-dominated rows of finite ``points``.

    In lexicographic order a point can only be dominated by one before it. Dominance is
    transitive. So each point need only be compared with the front found so far: O(n x front
    size). Two objectives, the common case, take a vectorised sweep instead."""
    if points.shape[1] == 2:
        return _non_dominated_2d(points)
    order = np.lexsort(points.T[::-1])
    front: list[int] = []
    for i in order:
        if front:
            kept = points[front]
            if np.any(np.all(kept <= points[i], axis=1) & np.any(kept < points[i], axis=1)):
                continue
        front.append(int(i))
    return np.sort(np.asarray(front, dtype=np.int64))


def _non_dominated_2d(points: np.ndarray) -> np.ndarray:
    """The non-dominated rows of two objectives, by a sweep in O(n log n).

    Sorted by (first, second), a point may be dominated by an earlier one. That one has a smaller
    first value and a second value no larger. Or it is the first of the point's own first value,
    with a smaller second value. So a prefix minimum and a group start decide."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    first, second = points[order, 0], points[order, 1]
    before = np.concatenate(([np.inf], np.minimum.accumulate(second)))  # min of second[:i]
    start = np.searchsorted(first, first, side="left")  # where each point's first value begins
    dominated = (before[start] <= second) | (second[start] < second)
    return np.sort(order[~dominated])


def crowding(points: np.ndarray) -> np.ndarray:
    """NSGA-II's crowding distance of each row of one front.

    Per objective, it is the gap between the row's two neighbours over that objective's range.
    The gaps are summed. The extremes get infinity. So selection keeps the ends of the front and
    then its sparsest parts."""
    points = np.asarray(points, dtype=np.float64)
    n, k = points.shape
    distance = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(k):
        order = np.argsort(points[:, j], kind="stable")
        column = points[order, j]
        span = column[-1] - column[0]
        distance[order[0]] = distance[order[-1]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (column[2:] - column[:-2]) / span
    return distance


def hypervolume(points: np.ndarray, reference: Sequence[float]) -> float:
    """The volume dominated by ``points`` and bounded by ``reference``.

    All is to minimise, so the reference is the worst corner. Points not strictly better than it
    in every objective add nothing. It is exact, by slicing along the last objective (HSO). That
    is fine for fronts of hundreds."""
    ref = np.asarray(reference, dtype=np.float64)
    points = np.asarray(points, dtype=np.float64).reshape(-1, len(ref))
    points = points[np.isfinite(points).all(axis=1) & (points < ref).all(axis=1)]
    if not len(points):
        return 0.0
    return _slices(points[_non_dominated(points)], ref)


def _slices(points: np.ndarray, ref: np.ndarray) -> float:
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    order = np.argsort(points[:, -1], kind="stable")
    points = points[order]
    volume = 0.0
    for i in range(len(points)):
        upper = points[i + 1, -1] if i + 1 < len(points) else ref[-1]
        if upper > points[i, -1]:
            below = points[: i + 1, :-1]
            volume += _slices(below[_non_dominated(below)], ref[:-1]) * (upper - points[i, -1])
    return volume
