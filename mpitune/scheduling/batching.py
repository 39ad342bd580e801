"""How big a hand-out is and which rank gets which of its configurations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.model.replay_clock import RecordedRun
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

# Configurations per rank in a batch by default: a strategy that knows its order in advance
# (brute force) gets chunks long enough for compile workers to stay ahead and for few rounds,
# each of which waits for the slowest rank (docs/performance.md, "Chunks and batches"); one that
# learns from every result gets one each, to learn soonest.
PER_RANK_PREDICTABLE = 32
# Refilled ranks that compile in turn get shorter chunks on many ranks: a chunk is raced against
# the best known when it was dealt, and a short one is dealt later, against a fresher best. About
# this many configurations in all per hand-out round, 4 to 32 a rank (docs/performance.md);
# ranks with compile workers keep 32: shorter chunks starve their workers. Such a rank holds one
# chunk at a time (``Dealing.depth``), so a short one costs it no wait but rank 0's answer.
IN_TURN_ROUND = 256
IN_TURN_PER_RANK = (4, PER_RANK_PREDICTABLE)


def deal(ids: list[int], ranks: int, batch: int) -> list[list[int]]:
    """One chunk per rank: interleaved, so that neighbouring (similarly costly)
    configurations spread out, and rotated by batch, so that a parameter that alternates in
    id order (a cheap and a costly value) does not always land on the same rank."""
    chunks = [ids[r::ranks] for r in range(ranks)]
    shift = batch % ranks
    return chunks[shift:] + chunks[:shift]


def deal_as_recorded(
    ids: list[int], ranks: int, space: SearchSpace, recorded: RecordedRun | None
) -> list[list[int]] | None:
    """One chunk per rank as the replayed run dealt it: a replay of a run on as many ranks
    measures each configuration on the rank that did, so that each rank's time is the one the
    run recorded, which dealing by predicted cost again (on the replay's own clock) need not
    give. None when this is no such replay, or a configuration was never dealt in it."""
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
    """One chunk per rank, so that the ranks finish their predicted seconds (``cost_s``,
    aligned with ``ids``) as evenly as can be: the batch waits for its slowest rank.
    ``busy_s`` is what each rank still has to do before it can start this batch (None:
    nothing; handouts.py predicts it), so that the costliest configurations go to the ranks
    that will be free first.

    Each block of ``ranks`` consecutive ids (in the strategy's order) is dealt one id per rank,
    as ``deal`` does, so that what a prediction misses about neighbouring configurations (a
    parameter value never measured before makes all of them costlier) still spreads over the
    ranks; within a block the costliest id goes to the rank with the least predicted work so
    far. Longest-first dealing of the whole batch balances the predictions better but puts the
    neighbours, and their common error, together: on replays of measured data it did worse.
    Ties go to the lower rank and the earlier id, so the same predictions deal the same way."""
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
    """How many batches are in flight under the ``batches`` policy (handouts.py): on several
    ranks two, so that each rank holds its next chunk when it finishes one and waits only when
    it is a whole batch ahead of the slowest (batch b is handed out once batch b - 2 is
    recorded); on one rank one, since a rank measures its chunks in turn anyway and a strategy
    learns soonest that way. Files written before each ask recorded what was told before it
    are resumed by this rule (resume.py): change it only with that replay."""
    return 2 if ranks > 1 else 1


def default_batch_size(ranks: int, strategy: Strategy, refilled_in_turn: bool = False) -> int:
    """Configurations per hand-out round for all ranks, as the constants above say
    (``refilled_in_turn``: many refilled ranks that compile in turn)."""
    if type(strategy).upcoming is Strategy.upcoming:
        return ranks
    if not refilled_in_turn:
        return ranks * PER_RANK_PREDICTABLE
    least, most = IN_TURN_PER_RANK
    return ranks * min(most, max(least, IN_TURN_ROUND // ranks))


@dataclass(frozen=True)
class Batching:
    """The batch size of a run, and whether its first batch is short.

    Guided (the default where batches are longer than one configuration per rank): until a
    configuration's cost is known the batch is one configuration per rank, so that the first
    long batch is dealt by predicted cost (``deal_by_cost``) rather than blind. Batches do not
    shrink towards the end of the search: with chunks dealt by predicted cost, every extra
    round adds its slowest rank's lead, and halving the batches over the last half of the
    configurations cost 0.3 points of efficiency on 64 replayed ranks and 2.8 on 256.
    """

    ranks: int
    size: int
    guided: bool

    @classmethod
    def of(cls, ranks: int, strategy: Strategy, requested: int | None, refilled_in_turn: bool = False) -> Batching:
        """``requested`` is the user's batch size (None: the default, guided on several ranks;
        one rank has nothing to deal by cost); ``refilled_in_turn``: the run is refilled and its
        ranks compile in turn (``default_batch_size``)."""
        size = requested or default_batch_size(ranks, strategy, refilled_in_turn)
        return cls(ranks, size, requested is None and size > ranks > 1)

    def next_size(self, budget_left: int | None, costs_known: bool) -> int:
        """Configurations in the next batch with ``budget_left`` more allowed (None: no budget),
        and whether any configuration's cost was measured yet (``costs_known``)."""
        n = self.size if costs_known or not self.guided else self.ranks
        return n if budget_left is None else min(n, budget_left)
