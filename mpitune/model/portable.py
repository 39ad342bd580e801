"""The portable choice: the configuration that does least badly on every device model (or block).

A configuration's ratio on a model is its value over that model's best (1 for the best, more the
worse). Its worst ratio is the largest over the models. ``portable`` picks the smallest worst ratio
among the configurations measured everywhere; it names the header's default and the portable choice
of ``report``. ``ranked_candidates`` ranks by the same rule, for a job of several device models
that times its best portable candidates on every model at its end (``--portable N``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

Block = TypeVar("Block", bound=Hashable)


@dataclass(frozen=True)
class Portable(Generic[Block]):
    """``portable``'s answer: the configuration's key, its ratio to each block's best and the worst of them.

    It also counts the configurations that have a value in every block: its candidates."""

    key: str
    ratios: dict[Block, float]
    worst_ratio: float
    common: int


def portable(values: Mapping[Block, Mapping[str, float]], higher_is_better: bool) -> Portable[Block] | None:
    """The configuration whose worst ratio to a block's best value is smallest.

    Only configurations with a value in every block count. ``values`` maps block -> configuration
    key -> its value there. Among equals, the first in the first block's order wins. None where no
    configuration is in every block.

    This is the one rule for a configuration that does least badly everywhere. It gives the header's
    default over a results file's (device, problem size) blocks. It gives the portable choice over
    GPU models too."""
    if not values or not all(values.values()):
        return None
    pick = max if higher_is_better else min
    best = {block: pick(mine.values()) for block, mine in values.items()}
    first, *others = values.values()
    common = [k for k in first if all(k in mine for mine in others)]
    if not common:
        return None
    worst = {k: max(ratio(mine[k], best[b], higher_is_better) for b, mine in values.items()) for k in common}
    key = min(common, key=lambda k: worst[k])
    ratios = {b: ratio(mine[key], best[b], higher_is_better) for b, mine in values.items()}
    return Portable(key, ratios, worst[key], len(common))


def ratio(value: float, best: float, higher_is_better: bool) -> float:
    """How far ``value`` is from its block's ``best``: 1 for the best, more the worse."""
    worse, better = (best, value) if higher_is_better else (value, best)
    if better <= 0:
        return 1.0 if worse == better else float("inf")
    return worse / better


def ranked_candidates(times_ms: Sequence[np.ndarray], n: int) -> list[int]:
    """The ``n`` configuration ids most worth timing on every model, best first.

    First come the ids measured on every model, by their worst ratio to a model's best (the rule of
    ``portable``). Then those some model lacks: fewer models lacking first, then by their worst ratio
    where measured. Equals go by id, so that every model's leader, given the same times, ranks alike.

    Args:
        times_ms: one array per model, each id's best time there in ms (NaN: not measured, or failed).
        n: how many to return.

    Returns:
        At most ``n`` ids, each measured on at least one model.
    """
    times = np.vstack([np.asarray(t, dtype=np.float64) for t in times_ms])
    measured = np.isfinite(times) & (times > 0)
    best = np.min(np.where(measured, times, np.inf), axis=1, keepdims=True)
    ratios = np.where(measured, times / best, -np.inf)
    count, worst = measured.sum(axis=0), ratios.max(axis=0)
    ids = np.flatnonzero(count > 0)
    order = np.lexsort((ids, worst[ids], -count[ids]))
    return [int(i) for i in ids[order][:n]]
