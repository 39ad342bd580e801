"""Dealing batches to ranks and sizing them, as pure functions of the strategy, the budget and
the predicted costs."""

from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.batching import PER_RANK_PREDICTABLE, Batching, deal, deal_by_cost
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


def test_dealing_by_cost_evens_out_the_predicted_work_one_id_per_rank_from_each_block():
    ids = [20, 21, 22, 23, 24, 25, 26, 27]
    cost_s = [5, 1, 5, 1, 5, 1, 1, 5]
    chunks = deal_by_cost(ids, cost_s, 2)
    # Interleaved, rank 0 would get 5 + 5 + 5 + 1 s and rank 1 1 + 1 + 1 + 5 s.
    assert chunks == [[20, 23, 24, 26], [21, 22, 25, 27]]
    load = dict(zip(ids, cost_s))
    assert [sum(load[i] for i in chunk) for chunk in chunks] == [12, 12]
    # Every block of `ranks` consecutive ids gives each rank one; the strategy's order is kept.
    assert [sorted(i // 2 for i in chunk) for chunk in chunks] == [[10, 11, 12, 13]] * 2
    assert deal_by_cost([3, 1, 2], [1.0, 9.0, 1.0], 4) == [[1], [3], [2], []]
    assert deal_by_cost(ids, cost_s, 2) == chunks  # deterministic


def test_a_predictable_strategy_gets_long_guided_batches_and_a_learning_one_one_per_rank():
    space = SearchSpace.build({"a": list(range(10))}, [])
    brute = Batching.of(4, create("brute_force", space, 0, {}), None)
    assert brute == Batching(4, 4 * PER_RANK_PREDICTABLE, guided=True)
    assert Batching.of(4, create("genetic_algorithm", space, 0, {}), None) == Batching(4, 4, guided=False)
    assert Batching.of(4, create("brute_force", space, 0, {}), 8) == Batching(4, 8, guided=False)


def test_refilled_ranks_that_compile_in_turn_get_shorter_chunks_on_many_ranks():
    """About IN_TURN_ROUND configurations a round, 4 to 32 a rank; with compile workers, or for a
    strategy that learns from every result, or for a batch size the user gave, nothing changes."""
    space = SearchSpace.build({"a": list(range(10))}, [])
    brute = create("brute_force", space, 0, {})
    per_rank = {n: Batching.of(n, brute, None, refilled_in_turn=True).size // n for n in (4, 8, 16, 32, 64, 256)}
    assert per_rank == {4: 32, 8: 32, 16: 16, 32: 8, 64: 4, 256: 4}
    assert Batching.of(256, brute, None).size == 256 * PER_RANK_PREDICTABLE
    assert Batching.of(256, create("genetic_algorithm", space, 0, {}), None, refilled_in_turn=True).size == 256
    assert Batching.of(256, brute, 512, refilled_in_turn=True).size == 512


def test_a_guided_search_starts_with_one_configuration_per_rank_until_costs_are_known():
    guided = Batching(2, 32, guided=True)
    assert guided.next_size(None, costs_known=False) == 2
    assert guided.next_size(None, costs_known=True) == 32
    assert guided.next_size(7, costs_known=True) == 7  # within the budget
    assert guided.next_size(0, costs_known=False) == 0
    fixed = Batching(2, 8, guided=False)  # the user's batch size holds from the first batch
    assert fixed.next_size(None, costs_known=False) == 8
    assert fixed.next_size(5, costs_known=True) == 5
