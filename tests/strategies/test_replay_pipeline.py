"""benchmarks/strategies.py's replay of the scheduler's pipeline: the simulated wall time of
batches in flight, and the order in which the strategy is asked and told."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from search_problems import TINY

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "strategies.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARK.parent))  # it imports its sibling priors.py, as run from there
    spec = importlib.util.spec_from_file_location("benchmark_strategies", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
    sys.path.remove(str(BENCHMARK.parent))


def wall_s(bench, batches: list[list[float]], ranks: int, depth: int) -> float:
    """The simulated wall time of batches of configurations that cost these seconds, each its own
    value of one parameter (so nothing predicts one configuration's cost from another's)."""
    costs = [c for batch in batches for c in batch]
    space = SearchSpace.build({"a": list(range(len(costs)))}, [])
    size = len(space)
    cache = bench.Replay("costs", space, ["ok"] * size, np.ones(size), np.array(costs), 1.0, 1.0)
    ids = iter(range(size))
    return bench.pipeline_wall_s(cache, [[next(ids) for _ in batch] for batch in batches], ranks, depth)


def test_one_batch_in_flight_is_rounds_that_wait_for_the_slowest_rank(bench):
    assert wall_s(bench, [[3.0, 1.0], [1.0, 3.0], [1.0, 1.0]], 2, 1) == 3 + 3 + 1


def test_two_in_flight_let_a_rank_start_its_next_chunk_before_the_slowest_is_done(bench):
    # Batch 1 is dealt rotated (batching.deal): its 3 s to rank 1, which runs it from t=1 while
    # rank 0 still runs batch 0 (to t=3); both finish batch 1 at t=4; batch 2 is handed out when
    # batch 0 is gathered (t=3), so it runs from t=4 to t=5.
    assert wall_s(bench, [[3.0, 1.0], [3.0, 1.0], [1.0, 1.0]], 2, 2) == 5


def test_a_batch_is_handed_out_only_once_the_one_two_before_is_gathered(bench):
    # Rank 1 is idle in batches 0 and 1 but cannot take batch 2 before batch 0 is gathered (t=10).
    batches = [[10.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    assert wall_s(bench, batches, 2, 2) == 11
    assert wall_s(bench, batches, 2, 3) == 10  # three in flight: batch 2 is handed out at once


def test_rank_0_records_each_batch_before_its_next_chunk(bench):
    # Rank 0's chunk of batch 1 (3 s, dealt rotated) starts once batch 0 is gathered (t=3), not
    # when its own ends (t=1).
    assert wall_s(bench, [[1.0, 3.0], [1.0, 3.0]], 2, 2) == 3 + 3


def test_chunks_are_dealt_interleaved_before_any_cost_is_known(bench):
    assert wall_s(bench, [[1.0, 2.0, 4.0, 8.0]], 2, 2) == 2 + 8  # rank 1: ids 1 and 3


def test_once_costs_are_known_the_costliest_goes_to_the_rank_free_first(bench):
    # Parameter a decides the cost: 1 s, or 5 s. Batch 0 (ids 0 and 4) teaches it; batch 1 is
    # dealt rotated, so rank 0 runs 5 s of it from t=5 (when it has recorded batch 0) to 10, and
    # rank 1 1 s from 5 to 6. Batch 2 (ids 6 and 2) is dealt at t=5: its 5 s to rank 1, free
    # at 6, and its 1 s to rank 0, free at 10, so both end at 11; blind, rank 0 would get the
    # 5 s and end at 15.
    space = SearchSpace.build({"a": [0, 1], "b": [0, 1, 2, 3]}, [])
    cost_s = np.array([1.0 + 4.0 * space.config(i)["a"] for i in range(len(space))])
    cache = bench.Replay("costs", space, ["ok"] * len(space), np.ones(len(space)), cost_s, 1.0, 1.0)
    assert [space.config(i)["a"] for i in (0, 4, 1, 5, 6, 2)] == [0, 1, 0, 1, 1, 0]
    assert bench.pipeline_wall_s(cache, [[0, 4], [1, 5], [6, 2]], 2, 2) == 11


class Recorder(Strategy):
    """Hands out ids in order and records, at each ask, how many results it was told."""

    def __init__(self, space, seed):
        super().__init__(space, seed)
        self.told_at_ask: list[int] = []

    def ask(self, n):
        self.told_at_ask.append(len(self.values))
        return self.random_unseen(n)


@pytest.mark.parametrize("depth", [1, 2])
def test_the_replay_asks_batch_b_once_batch_b_minus_depth_is_told(bench, monkeypatch, depth):
    size = len(TINY)
    replay = bench.Replay("tiny", TINY, ["ok"] * size, np.arange(1.0, size + 1), np.ones(size), 5.0, 1.0)
    made: list[Recorder] = []

    def create(name, space, seed, options, prior=None):
        made.append(Recorder(space, seed))
        return made[-1]

    monkeypatch.setattr(bench.strategies, "create", create)
    search = bench.replay(replay, "recorder", 0, [3, 8], 2, depth)
    assert made[0].told_at_ask == [2 * max(0, b - depth + 1) for b in range(4)]  # 4 batches of 2 ranks
    assert (search.wall_s, search.serial_s) == (4, 8)  # one second per configuration, nothing waits
    assert set(search.scores) == {3, 8}
