"""How big each batch is and which rank gets which of its configurations."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpitune.strategies.base import Strategy

# Configurations per rank in a batch by default: a strategy that knows its order in advance
# (brute force) gets chunks long enough for compile workers to stay ahead and for few
# gathers; one that learns from every result gets one each, so that it learns soonest.
PER_RANK_PREDICTABLE = 16
TAIL_SHARE = 2  # a guided batch takes at most 1/TAIL_SHARE of what is left


def deal(ids: list[int], ranks: int, batch: int) -> list[list[int]]:
    """One chunk per rank: interleaved, so that neighbouring (similarly costly)
    configurations spread out, and rotated by batch, so that a parameter that alternates in
    id order (a cheap and a costly value) does not always land on the same rank."""
    chunks = [ids[r::ranks] for r in range(ranks)]
    shift = batch % ranks
    return chunks[shift:] + chunks[:shift]


def default_batch_size(ranks: int, strategy: Strategy) -> int:
    predictable = type(strategy).upcoming is not Strategy.upcoming
    return ranks * (PER_RANK_PREDICTABLE if predictable else 1)


@dataclass(frozen=True)
class Batching:
    """The batch size of a run, and whether batches shrink towards the end of the search.

    Guided (the default where batches are longer than one configuration per rank): the last
    batches, where ranks can only wait for the slowest, are short.
    """

    ranks: int
    size: int
    guided: bool

    @classmethod
    def of(cls, ranks: int, strategy: Strategy, requested: int | None) -> Batching:
        """``requested`` is the user's batch size (None: the default, guided)."""
        size = requested or default_batch_size(ranks, strategy)
        return cls(ranks, size, requested is None and size > ranks)

    def next_size(self, left: int, budget_left: int | None) -> int:
        """Configurations in the next batch, with ``left`` never handed out and ``budget_left``
        more allowed (None: no budget): the batch size within the budget, and in a guided
        search at most a 1/TAIL_SHARE share of what is left per rank."""
        n = self.size if budget_left is None else min(self.size, budget_left)
        if self.guided:
            if budget_left is not None:
                left = min(left, budget_left)
            n = min(n, self.ranks * max(1, math.ceil(left / (self.ranks * TAIL_SHARE))))
        return n
