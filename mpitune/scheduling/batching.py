"""How big a hand-out is and which rank gets which of its configurations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.model.replay_clock import RecordedRun
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

# Configurations per rank in a batch by default for a strategy that knows its order in advance:
# enough for compile workers to stay ahead, in few rounds (docs/performance.md, "Chunks and
# batches"). One that learns from every result gets one each, to learn soonest.
PER_RANK_PREDICTABLE = 32
# Refilled ranks that compile in turn get shorter chunks on many ranks, dealt later against a
# fresher best; they hold one at a time (``Dealing.depth``). This many configurations a round,
# 4 to 32 a rank (docs/performance.md). Ranks with compile workers keep 32: less starves them.
IN_TURN_ROUND = 256
IN_TURN_PER_RANK = (4, PER_RANK_PREDICTABLE)


def deal(ids: list[int], ranks: int, batch: int) -> list[list[int]]:
    """One chunk per rank, interleaved and rotated by batch. Interleaving spreads neighbouring,
    similarly costly configurations. Rotating keeps a parameter that alternates in id order (a cheap
    and a costly value) off always the same rank."""
    chunks = [ids[r::ranks] for r in range(ranks)]
    shift = batch % ranks
    return chunks[shift:] + chunks[:shift]


def deal_as_recorded(
    ids: list[int], ranks: int, space: SearchSpace, recorded: RecordedRun | None
) -> list[list[int]] | None:
    """One chunk per rank as the replayed run dealt it. A replay on as many ranks measures each
    configuration on the rank that did, so each rank's time is the recorded one. Dealing by cost
    again, on the replay's own clock, need not give that. None when this is no such replay, or a
    configuration was never dealt in it."""
    if recorded is None or recorded.ranks != ranks or not recorded.dealt:
        return None
    chunks: list[list[int]] = [[] for _ in range(ranks)]
    for i in ids:
        rank = recorded.dealt.get(tuple(space.config(i).values()))
        if rank is None:
            return None
        chunks[rank].append(i)
    return chunks


def deal_by_cost(
    ids: list[int],
    cost_s: Sequence[float] | np.ndarray,
    ranks: int,
    busy_s: Sequence[float] | np.ndarray | None = None,
) -> list[list[int]]:
    """One chunk per rank, so that the ranks finish their predicted seconds as evenly as can be.

    ``cost_s`` is aligned with ``ids``; ``busy_s`` is what each rank must still do first (None:
    nothing). Each block of ``ranks`` consecutive ids is dealt one per rank, as ``deal`` does, the
    costliest to the least loaded rank. What a prediction misses about neighbours then still spreads
    over the ranks; longest-first over the whole batch put them together, and did worse on replays.
    Ties go to the lower rank and the earlier id: the same predictions deal the same way."""
    cost = np.asarray(cost_s, dtype=np.float64)
    loads_s = np.zeros(ranks) if busy_s is None else np.array(busy_s, dtype=np.float64)
    chunks: list[list[int]] = [[] for _ in range(ranks)]
    for start in range(0, len(ids), ranks):
        block = np.arange(start, min(start + ranks, len(ids)))
        costliest_first = block[np.argsort(-cost[block], kind="stable")]
        least_loaded = np.argsort(loads_s, kind="stable")[: len(block)]
        for i, rank in zip(costliest_first.tolist(), least_loaded.tolist()):
            chunks[rank].append(ids[i])
            loads_s[rank] += cost[i]
    return chunks


def pipeline_depth(ranks: int) -> int:
    """How many batches are in flight under the ``batches`` policy (handouts.py). On several ranks
    two: a rank holds its next chunk when it finishes one, and waits only when a whole batch ahead
    of the slowest. On one rank one: it measures its chunks in turn anyway, and a strategy learns
    soonest. Old files, recorded before asks kept what was told, resume by this rule (resume.py):
    change it only with that replay."""
    return 2 if ranks > 1 else 1


def default_batch_size(ranks: int, strategy: Strategy, refilled_in_turn: bool = False) -> int:
    """Configurations per hand-out round for all ranks, as the constants above say.
    ``refilled_in_turn``: many refilled ranks that compile in turn."""
    if type(strategy).upcoming is Strategy.upcoming:
        return ranks
    if not refilled_in_turn:
        return ranks * PER_RANK_PREDICTABLE
    least, most = IN_TURN_PER_RANK
    return ranks * min(most, max(least, IN_TURN_ROUND // ranks))


@dataclass(frozen=True)
class Batching:
    """The batch size of a run, and whether its first batch is short. Guided (the default where
    batches hold several configurations a rank): one configuration per rank until a cost is known,
    so the first long batch is dealt by cost, not blind. Batches do not shrink towards the end:
    every extra round adds its slowest rank's lead (docs/performance.md)."""

    ranks: int
    size: int
    guided: bool

    @classmethod
    def of(cls, ranks: int, strategy: Strategy, requested: int | None, refilled_in_turn: bool = False) -> Batching:
        """``requested`` is the user's batch size. None: the default, guided on several ranks (one
        rank has nothing to deal by cost). ``refilled_in_turn``: refilled ranks that compile in
        turn."""
        size = requested or default_batch_size(ranks, strategy, refilled_in_turn)
        return cls(ranks, size, requested is None and size > ranks > 1)

    def next_size(self, budget_left: int | None, costs_known: bool) -> int:
        """Configurations in the next batch. ``budget_left``: how many more are allowed (None: no
        budget). ``costs_known``: whether any configuration's cost was measured yet."""
        n = self.size if costs_known or not self.guided else self.ranks
        return n if budget_left is None else min(n, budget_left)
