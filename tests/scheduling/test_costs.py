"""The cost model rank 0 deals by: predicted seconds per configuration from measured ones."""

import numpy as np
import pytest

from mpitune.model.result import Result, Status
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling import costs
from mpitune.scheduling.costs import CostModel, result_cost_s

SPACE = SearchSpace.build({"a": [1, 2, 3, 4], "b": [1, 2, 4], "c": [0, 1]}, [])


def measured(config_id: int, seconds: float, status: str = Status.OK) -> Result:
    """A result whose compile, verify and benchmark add up to ``seconds``."""
    if status == Status.COMPILE_ERROR:
        return Result(config_id, status, compile_s=seconds)
    return Result(config_id, status, compile_s=0.2 * seconds, verify_s=0.1 * seconds, benchmark_s=0.7 * seconds)


def true_cost_s(config: dict) -> float:
    return 0.1 * config["a"] * config["b"] * (3.0 if config["c"] else 1.0)


def test_a_result_costs_its_compile_verify_and_benchmark_seconds():
    assert result_cost_s(Result(0, Status.OK, compile_s=0.5, verify_s=0.25, benchmark_s=1.0)) == 1.75


def test_nothing_is_predicted_before_a_result_is_learned():
    model = CostModel(SPACE)
    assert model.predict_s([0, 1]) is None
    model.learn([])
    assert model.predict_s([0]) is None and model.learned == 0


def test_it_predicts_an_unmeasured_configuration_from_measured_ones_that_share_its_values():
    left_out = SPACE.id_of(np.array([[2, 1, 1]]))[0]  # a=3, b=2, c=1: true cost 1.8 s
    model = CostModel(SPACE)
    model.learn(measured(i, true_cost_s(SPACE.config(i))) for i in range(len(SPACE)) if i != left_out)
    predicted = model.predict_s(list(range(len(SPACE))))
    truth = np.array([true_cost_s(SPACE.config(i)) for i in range(len(SPACE))])
    assert predicted is not None
    assert predicted[left_out] == pytest.approx(1.8, rel=0.25)
    # Costs span 0.1 to 4.8 s; the predicted order is the true one wherever they differ by 2x.
    for i in range(len(SPACE)):
        for j in range(len(SPACE)):
            if truth[i] > 2 * truth[j]:
                assert predicted[i] > predicted[j]


def test_a_dealt_batch_is_predicted_chunk_by_chunk():
    model = CostModel(SPACE)
    assert model.chunks_s([[0], [1]]) is None
    model.learn(measured(i, true_cost_s(SPACE.config(i))) for i in range(10))
    chunks = [[3, 11], [], [5]]
    predicted = model.predict_s([3, 11, 5])
    assert predicted is not None
    assert model.chunks_s(chunks) == pytest.approx([predicted[0] + predicted[1], 0.0, predicted[2]])
    assert model.chunks_s([[], []]) == pytest.approx([0.0, 0.0])


def test_a_value_that_fails_to_compile_is_learned_to_be_cheap():
    model = CostModel(SPACE)
    results = []
    for i in range(len(SPACE)):
        config = SPACE.config(i)
        if config["a"] == 4 and config["b"] == 4:
            continue  # never measured
        failing = config["c"] == 1 and config["a"] >= 3
        results.append(measured(i, 0.02 if failing else 2.0, Status.COMPILE_ERROR if failing else Status.OK))
    model.learn(results)
    cheap, costly = SPACE.id_of(np.array([[3, 2, 1], [3, 2, 0]]))  # a=4, b=4, c=1 and c=0
    predicted = model.predict_s([cheap, costly])
    assert predicted is not None and predicted[0] < 0.2 < 1.0 < predicted[1]


def test_the_same_results_give_the_same_predictions_and_learning_in_parts_equals_at_once():
    results = [measured(i, true_cost_s(SPACE.config(i))) for i in range(0, len(SPACE), 2)]
    at_once, in_parts = CostModel(SPACE), CostModel(SPACE)
    at_once.learn(results)
    in_parts.learn(results[:5])
    in_parts.predict_s([0])  # solving in between must not stick
    in_parts.learn(results[5:])
    ids = list(range(len(SPACE)))
    np.testing.assert_allclose(at_once.predict_s(ids), in_parts.predict_s(ids), rtol=1e-9)


def test_pairs_of_values_are_features_only_as_far_as_the_cap_allows(monkeypatch):
    space = SearchSpace.build({f"p{i}": list(range(5)) for i in range(6)}, [])
    assert CostModel(space).features == 1 + 6 * 4 + 15 * 16
    monkeypatch.setattr(costs, "MAX_FEATURES", 60)
    capped = CostModel(space)
    assert capped.features == 1 + 6 * 4 + 2 * 16  # whole pairs only, in parameter order
    capped.learn([measured(0, 1.0)])
    assert capped.predict_s([1]).shape == (1,)
    monkeypatch.setattr(costs, "MAX_FEATURES", 10)
    assert CostModel(space).features == 1 + 2 * 4  # whole parameters only, and no pairs


def test_the_sums_learned_are_those_of_the_indicator_matrix():
    """FᵀF and Fᵀy summed from the set indicators alone equal the dense products."""
    ids = [0, 5, 7, 11, 23, 17, 17]
    model = CostModel(SPACE)
    model.learn(measured(i, 0.1 * (i + 1)) for i in ids)
    dense = np.zeros((len(ids), model.features + 1))
    dense[np.arange(len(ids))[:, None], model._active(ids)] = 1.0
    dense = dense[:, :-1]
    gram = model._upper + model._upper.T - np.diag(np.diagonal(model._upper))
    np.testing.assert_array_equal(gram, dense.T @ dense)
    np.testing.assert_allclose(model._moment, dense.T @ np.log([0.1 * (i + 1) for i in ids]))
    assert dense[:, 0].all() and dense.sum() > len(ids)  # the intercept, and more than it


def test_the_weights_are_solved_again_once_the_results_grew_by_a_sixteenth_or_by_32():
    """A refill predicts at every hand-out; a solve at each cost a 256-rank plan minutes."""
    model = CostModel(SPACE)
    model.learn_values(list(range(24)) * 40, [1.0] * 960)  # 960 results: the next solve after 32 more
    first = model.predict_s([0])
    model.learn_values([0] * 32, [100.0] * 32)
    assert model.predict_s([0]) == pytest.approx(first)  # 32 more: not yet
    model.learn_values([0], [100.0])
    assert model.predict_s([0])[0] > 1.05 * first[0]  # 33 more: solved again
    early = CostModel(SPACE)
    early.learn_values([0] * 16, [1.0] * 16)
    early.predict_s([0])
    early.learn_values([0, 0], [100.0, 100.0])  # 2 more than 16: more than a sixteenth
    assert early.predict_s([0])[0] > 1.05
