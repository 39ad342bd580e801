"""Dealing batches to ranks and sizing them, as pure functions of the strategy and the budget."""

from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.batching import PER_RANK_PREDICTABLE, Batching, deal
from mpitune.strategies import create


def test_dealing_interleaves_and_rotates_by_batch():
    assert deal([10, 11, 12, 13, 14], 2, 0) == [[10, 12, 14], [11, 13]]
    assert deal([10, 11, 12, 13, 14], 2, 1) == [[11, 13], [10, 12, 14]]
    assert deal([7], 3, 4) == [[], [], [7]]
    # Over consecutive batches of one id per rank, odd and even ids reach both ranks.
    seen = {0: set(), 1: set()}
    for batch in range(4):
        for rank, chunk in enumerate(deal([2 * batch, 2 * batch + 1], 2, batch)):
            seen[rank].update(i % 2 for i in chunk)
    assert seen == {0: {0, 1}, 1: {0, 1}}


def test_a_predictable_strategy_gets_long_guided_batches_and_a_learning_one_one_per_rank():
    space = SearchSpace.build({"a": list(range(10))}, [])
    brute = Batching.of(4, create("brute_force", space, 0, {}), None)
    assert brute == Batching(4, 4 * PER_RANK_PREDICTABLE, guided=True)
    assert Batching.of(4, create("genetic_algorithm", space, 0, {}), None) == Batching(4, 4, guided=False)
    assert Batching.of(4, create("brute_force", space, 0, {}), 8) == Batching(4, 8, guided=False)


def test_guided_batches_take_at_most_half_of_what_is_left_and_stay_within_the_budget():
    guided = Batching(2, 32, guided=True)
    assert [guided.next_size(left, None) for left in (100, 40, 20, 10, 4, 2, 1)] == [32, 20, 10, 6, 2, 2, 2]
    assert guided.next_size(100, 7) == 4  # half of the budget left, rounded up to whole ranks
    assert guided.next_size(100, 0) == 0
    fixed = Batching(2, 8, guided=False)
    assert [fixed.next_size(left, None) for left in (100, 3)] == [8, 8]  # the strategy gives fewer
    assert fixed.next_size(100, 5) == 5
