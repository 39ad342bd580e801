"""Where in a search space to look next, given what a strategy has already seen.

Several strategies need the same answers. Where is a spread-out initial design? Which unseen
configuration is nearest to a continuous point? What are the next unseen ids of a fixed order,
and the best results so far? These are pure functions of the space and the seen ids. So they can
be tested and reasoned about alone. ``Strategy`` keeps the state: what is seen, the seeded
generators. It marks what they return as seen.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Container, Iterable, Mapping, Sequence

import numpy as np

from mpitune.model.searchspace import SearchSpace

DESIGN_CANDIDATES = 5  # random unseen candidates per slot of the space-filling design
NEAREST_BLOCK = 1 << 16  # unseen configurations per block of nearest_unseen's scan
LOCAL_CELLS = 1 << 17  # grid cells in nearest_unseen's largest ball before it scans the space
SEEN_BLOCK = 4096  # seen configurations per block of space_filling's distance computation


def seen_mask(size: int, seen: Collection[int]) -> np.ndarray:
    """A boolean array over the ids of a space of ``size``: True where seen."""
    mask = np.zeros(size, dtype=bool)
    if seen:
        mask[np.fromiter(seen, dtype=np.int64, count=len(seen))] = True
    return mask


def first_unseen(candidates: Iterable[int], seen: Container[int], n: int) -> list[int]:
    """Up to ``n`` distinct ids from ``candidates`` that are not in ``seen``, in their order."""
    batch: list[int] = []
    taken: set[int] = set()
    for candidate in candidates:
        if len(batch) == n:
            break
        config_id = int(candidate)
        if config_id not in seen and config_id not in taken:
            taken.add(config_id)
            batch.append(config_id)
    return batch


def scan(order: Sequence[int] | np.ndarray, start: int, seen: Container[int], n: int) -> tuple[list[int], int]:
    """The next ``n`` unseen ids of a fixed order from position ``start``, and the position after.

    The order is Cartesian or a seeded permutation. Walking it this way hands out each id once.
    It skips what a resumed cache already has. It lets a strategy say its next batch before
    asking for it."""
    batch: list[int] = []
    i = start
    while len(batch) < n and i < len(order):
        config_id = int(order[i])
        i += 1
        if config_id not in seen:
            batch.append(config_id)
    return batch, i


def space_filling(space: SearchSpace, seen: Collection[int], rng: np.random.Generator, n: int) -> list[int]:
    """Up to ``n`` unseen ids spread over the space, for initial designs.

    This is best-candidate sampling. Each slot draws ``DESIGN_CANDIDATES`` random unseen
    configurations. It takes the one farthest from everything seen and chosen so far, in unit
    coordinates. Like random sampling, it only picks valid configurations, in proportion to
    where they lie. But it avoids putting two samples close together. So a first batch covers
    more of the space than a uniform random one. [] only when the space is exhausted."""
    free = np.flatnonzero(~seen_mask(len(space), seen))
    if not len(free) or n <= 0:
        return []
    n = min(n, len(free))
    k = min(DESIGN_CANDIDATES, len(free) // n)
    candidates = rng.choice(free, n * k, replace=False)
    points = space.unit_coordinates(candidates)
    nearest = np.full(len(candidates), np.inf)  # squared distance to the nearest seen or chosen
    if seen:
        seen_points = space.unit_coordinates(np.fromiter(seen, dtype=np.int64, count=len(seen)))
        for start in range(0, len(seen_points), SEEN_BLOCK):
            block = seen_points[start : start + SEEN_BLOCK]
            dist = (points**2).sum(1)[:, None] - 2 * points @ block.T + (block**2).sum(1)[None, :]
            nearest = np.minimum(nearest, dist.min(1))
    batch: list[int] = []
    for slot in range(n):
        j = slot * k + int(np.argmax(nearest[slot * k : (slot + 1) * k]))
        batch.append(int(candidates[j]))
        nearest = np.minimum(nearest, ((points - points[j]) ** 2).sum(1))
    return batch


def nearest_unseen(space: SearchSpace, unseen: np.ndarray, points: np.ndarray) -> list[int]:
    """For each point in unit coordinates, the closest unseen configuration not yet taken.

    Unit coordinates are those of ``SearchSpace.unit_coordinates``. Unseen is where the mask
    ``unseen`` is True. A configuration taken by an earlier point is skipped; ties go to the
    lowest id. Continuous moves (differential evolution, swarms) land between or outside
    configurations. This snaps them back without ever repeating one.

    A space may be larger than one block of the scan (``NEAREST_BLOCK``). Then a point's answer
    is looked for first in a ball around it (``_near``). The ball's cost does not grow with the
    space. The nearest unseen configuration may lie farther than ``LOCAL_CELLS`` grid cells
    allow. Then a scan of the whole space answers (``_scanned``). Both give the full scan's
    answer. Distances are computed alike, parameter by parameter, so equal distances are equal
    in both."""
    points = np.asarray(points, dtype=np.float64)
    if len(unseen) <= NEAREST_BLOCK:  # one block: the scan costs less than the balls
        return _scanned(space, unseen, points)
    n = min(len(points), int(unseen.sum()))
    batch: list[int] = []
    taken: set[int] = set()
    level = 0
    for i in range(n):
        near = _near(space, unseen, points[i], taken, max(0, level - 1))
        if near is None:  # too far for a ball: this point by the scan
            rest = unseen.copy()
            rest[list(taken)] = False
            found = _scanned(space, rest, points[i : i + 1])[0]
        else:
            found, level = near
        taken.add(found)
        batch.append(found)
    return batch


def _distances(points: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Squared distances [point, configuration], summed parameter by parameter in one order.

    So the ball and the scan compute every distance to the same last bit."""
    dist = np.zeros((len(points), len(coords)))
    for j in range(points.shape[1]):
        dist += (coords[None, :, j] - points[:, j, None]) ** 2
    return dist


def _near(
    space: SearchSpace, unseen: np.ndarray, point: np.ndarray, taken: set[int], start: int = 0
) -> tuple[int, int] | None:
    """(the nearest unseen configuration not in ``taken``, the level of the ball that found it).

    It is looked for among the grid cells within a radius of ``point``. The radius grows from
    level ``start``, its square doubling at each. None once the ball would hold more than
    ``LOCAL_CELLS`` cells. Points of one ask lie alike, so each starts a level below the last
    one's. Any level gives the same answer; a lower one is only cheaper when it suffices.

    The ball of radius r (unit coordinates) holds every configuration within r of the point.
    So the best in it is the nearest of all once its distance is at most r. Ties with it are in
    the ball too. The ball is drawn wider than r by more than the rounding of a distance. So what
    it leaves out is farther than r whatever the rounding."""
    scale = np.maximum(space.sizes - 1, 1).astype(np.float64)
    top = space.sizes - 1
    level = start
    while True:
        squared = float((1.0 / scale.max()) ** 2) * 2.0**level  # level 0: one step of the most-valued parameter
        rows = _ball(top, scale, point, squared * (1 + 1e-6))
        if rows is None:
            return None
        ids = space.id_of(rows)
        ids = ids[ids >= 0]
        ids = ids[unseen[ids]]
        if taken:
            ids = ids[~np.isin(ids, np.fromiter(taken, dtype=np.int64, count=len(taken)))]
        if len(ids):
            dist = _distances(point[None, :], space.unit_coordinates(ids))[0]
            best_d = float(dist.min())
            if best_d <= squared * (1 + 1e-9):
                return int(ids[dist == best_d].min()), level
        level += 1


def _ball(top: np.ndarray, scale: np.ndarray, point: np.ndarray, squared: float) -> np.ndarray | None:
    """The value-index rows within sqrt(``squared``) of ``point`` (unit coordinates).

    Each index is at most ``top``. Rows are built one parameter at a time. Each partial row keeps
    what is left of the squared radius. It spreads into the indices of the next parameter within
    it. None when more than ``LOCAL_CELLS`` rows would be made on the way."""
    rows = np.zeros((1, 0), dtype=np.int64)
    left = np.array([squared])
    for j in range(len(top)):
        reach = np.sqrt(left)
        lo = np.maximum(np.ceil((point[j] - reach) * scale[j]), 0).astype(np.int64)
        hi = np.minimum(np.floor((point[j] + reach) * scale[j]), top[j]).astype(np.int64)
        counts = np.maximum(hi - lo + 1, 0)
        total = int(counts.sum())
        if total > LOCAL_CELLS:
            return None
        parent = np.repeat(np.arange(len(rows)), counts)
        index = lo[parent] + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        left = left[parent] - (index / scale[j] - point[j]) ** 2
        keep = left >= 0  # a clipped side can leave an index beyond the reach
        rows = np.concatenate([rows[parent], index[:, None]], axis=1)[keep]
        left = left[keep]
    return rows


def _scanned(space: SearchSpace, unseen: np.ndarray, points: np.ndarray) -> list[int]:
    """``nearest_unseen`` by a scan of every unseen configuration, a block at a time.

    For each point it keeps only its ``len(points)`` nearest. At most that many minus one are
    taken before it, so its answer is among them. Memory stays at one block's distances, however
    large the space."""
    n = min(len(points), int(unseen.sum()))
    if n == 0:
        return []
    near_ids = [np.empty((len(points), 0), dtype=np.int64)]
    near_dist = [np.empty((len(points), 0))]
    for start in range(0, len(unseen), NEAREST_BLOCK):
        free = start + np.flatnonzero(unseen[start : start + NEAREST_BLOCK])
        if not len(free):
            continue
        dist = _distances(points, space.unit_coordinates(free))
        if len(free) > n:
            # Everything up to each point's n-th smallest distance, ties included, so that
            # the lowest ids among equal distances survive as a full scan would keep them.
            bound = np.partition(dist, n - 1, axis=1)[:, n - 1 : n]
            rows, cols = np.nonzero(dist <= bound)
            width = np.bincount(rows, minlength=len(points)).max()
            ids = np.full((len(points), width), -1, dtype=np.int64)
            kept = np.full((len(points), width), np.inf)
            slot = np.arange(len(rows)) - np.searchsorted(rows, rows)
            ids[rows, slot], kept[rows, slot] = free[cols], dist[rows, cols]
        else:
            ids, kept = np.broadcast_to(free, dist.shape), dist
        near_ids.append(ids)
        near_dist.append(kept)
    all_ids, all_dist = np.concatenate(near_ids, axis=1), np.concatenate(near_dist, axis=1)
    batch: list[int] = []
    taken: set[int] = set()
    for i in range(n):
        by_distance = all_ids[i][np.lexsort((all_ids[i], all_dist[i]))].tolist()  # ties: the lowest id first
        choice = next(c for c in by_distance if c >= 0 and c not in taken)
        taken.add(choice)
        batch.append(choice)
    return batch


def best(values: Mapping[int, float], k: int = 1) -> list[int]:
    """The ``k`` ids with the lowest value (failures, infinite, last), ties by id."""
    return heapq.nsmallest(k, values, key=lambda i: (values[i], i))  # = sorted(...)[:k], without the sort


def acquisition_candidates(
    space: SearchSpace, unseen: np.ndarray, around: Iterable[int], count: int, rng: np.random.Generator
) -> np.ndarray:
    """Where a model scores its acquisition.

    First come the unseen neighbours of the ids ``around``: the trust region where improvements
    usually are. Then a seeded random sample of the rest of the mask ``unseen``, in id order.
    That is ``count`` in all, unless the neighbours alone are more. Scoring a sample instead of
    the whole space keeps an ask fast on spaces of tens of thousands."""
    near = [space.neighbours(i) for i in around]
    close = np.unique(np.concatenate(near)) if near else np.empty(0, dtype=np.int64)
    close = close[unseen[close]]
    unseen = unseen.copy()
    unseen[close] = False
    rest = np.flatnonzero(unseen)
    take = max(0, count - len(close))
    if len(rest) > take:
        rest = np.sort(rng.choice(rest, take, replace=False))
    return np.concatenate([close, rest]).astype(np.int64)
