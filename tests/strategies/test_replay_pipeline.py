"""benchmarks/strategies.py's replay of the scheduler's pipeline: the simulated wall time of
batches in flight, and the order in which the strategy is asked and told."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from search_problems import TINY

from mpitune.strategies.base import Strategy

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "strategies.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("benchmark_strategies", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_one_batch_in_flight_is_rounds_that_wait_for_the_slowest_rank(bench):
    batches = [np.array([3.0, 1.0]), np.array([1.0, 3.0]), np.array([1.0, 1.0])]
    assert bench.pipeline_wall_s(batches, 2, 1) == 3 + 3 + 1


def test_two_in_flight_let_a_rank_start_its_next_chunk_before_the_slowest_is_done(bench):
    # Rank 1 runs batch 1 from t=1 while rank 0 still runs batch 0 (to t=3); both finish batch 1
    # at t=4; batch 2 is handed out when batch 0 is gathered (t=3), so it runs from t=4 to t=5.
    batches = [np.array([3.0, 1.0]), np.array([1.0, 3.0]), np.array([1.0, 1.0])]
    assert bench.pipeline_wall_s(batches, 2, 2) == 5


def test_a_batch_is_handed_out_only_once_the_one_two_before_is_gathered(bench):
    # Rank 1 is idle in batches 0 and 1 but cannot take batch 2 before batch 0 is gathered (t=10).
    batches = [np.array([10.0, 0.0]), np.array([0.0, 0.0]), np.array([0.0, 1.0])]
    assert bench.pipeline_wall_s(batches, 2, 2) == 11
    assert bench.pipeline_wall_s(batches, 2, 3) == 10  # three in flight: batch 2 is handed out at once


def test_rank_0_records_each_batch_before_its_next_chunk(bench):
    # Rank 0's chunk of batch 1 starts once batch 0 is gathered (t=3), not when its own ends (t=1).
    assert bench.pipeline_wall_s([np.array([1.0, 3.0]), np.array([3.0, 1.0])], 2, 2) == 3 + 3


def test_chunks_are_dealt_interleaved(bench):
    assert bench.pipeline_wall_s([np.array([1.0, 2.0, 4.0, 8.0])], 2, 2) == 2 + 8  # rank 1: ids 1 and 3


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

    def create(name, space, seed, options):
        made.append(Recorder(space, seed))
        return made[-1]

    monkeypatch.setattr(bench.strategies, "create", create)
    search = bench.replay(replay, "recorder", 0, [3, 8], 2, depth)
    assert made[0].told_at_ask == [2 * max(0, b - depth + 1) for b in range(4)]  # 4 batches of 2 ranks
    assert (search.wall_s, search.serial_s) == (4, 8)  # one second per configuration, nothing waits
    assert set(search.scores) == {3, 8}
