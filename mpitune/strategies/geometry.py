"""Where in a search space to look next, given what a strategy has already seen.

Several strategies need the same answers: a spread-out initial design, the unseen
configuration nearest to a continuous point, the next unseen ids of a fixed order, the best
results so far. They are pure functions of the space and the seen ids, so that they can be
tested and reasoned about alone; ``Strategy`` keeps the state (what is seen, the seeded
generators) and marks what they return as seen.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Container, Iterable, Mapping, Sequence

import numpy as np

from mpitune.model.searchspace import SearchSpace

DESIGN_CANDIDATES = 5  # random unseen candidates per slot of the space-filling design
NEAREST_BLOCK = 1 << 16  # unseen configurations per block of nearest_unseen's scan
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
    """The next ``n`` unseen ids of a fixed order (Cartesian, a seeded permutation) from
    position ``start``, and the position after the last one: walking an order this way hands
    out each id once, skips what a resumed cache already has, and lets a strategy say its next
    batch before asking for it."""
    batch: list[int] = []
    i = start
    while len(batch) < n and i < len(order):
        config_id = int(order[i])
        i += 1
        if config_id not in seen:
            batch.append(config_id)
    return batch, i


def space_filling(space: SearchSpace, seen: Collection[int], rng: np.random.Generator, n: int) -> list[int]:
    """Up to ``n`` unseen ids spread over the space, for initial designs: best-candidate
    sampling, where each slot draws ``DESIGN_CANDIDATES`` random unseen configurations and
    takes the one farthest (in unit coordinates) from everything seen and chosen so far.
    Like random sampling it only ever picks valid configurations, in proportion to where
    they lie, but it avoids putting two samples close together, so a first batch covers
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
    """For each point in unit coordinates (see ``SearchSpace.unit_coordinates``), the closest
    configuration where the mask ``unseen`` is True and not taken by an earlier point (ties:
    the lowest id). Continuous moves (differential evolution, swarms) land between or outside
    configurations; this snaps them back without ever repeating one.

    The unseen configurations are scanned a block at a time, keeping for each point only
    its ``len(points)`` nearest: at most that many minus one are taken before it, so its
    answer is among them. Memory stays at one block's distances, however large the space."""
    points = np.asarray(points, dtype=np.float64)
    n = min(len(points), int(unseen.sum()))
    if n == 0:
        return []
    squares = (points**2).sum(1)[:, None]
    near_ids = [np.empty((len(points), 0), dtype=np.int64)]
    near_dist = [np.empty((len(points), 0))]
    for start in range(0, len(unseen), NEAREST_BLOCK):
        free = start + np.flatnonzero(unseen[start : start + NEAREST_BLOCK])
        if not len(free):
            continue
        coords = space.unit_coordinates(free)
        dist = squares - 2 * points @ coords.T + (coords**2).sum(1)[None, :]
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


def candidates(
    space: SearchSpace, unseen: np.ndarray, around: Iterable[int], count: int, rng: np.random.Generator
) -> np.ndarray:
    """Where a model scores its acquisition: the unseen neighbours of the ids ``around`` (the
    trust region where improvements usually are), then a seeded random sample of the rest of the
    mask ``unseen`` in id order, ``count`` in all unless the neighbours alone are more. Scoring
    a sample instead of the whole space keeps an ask fast on spaces of tens of thousands."""
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
