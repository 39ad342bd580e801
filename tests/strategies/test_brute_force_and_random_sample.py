import pytest

from mpitune import strategies
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace

SPACE = SearchSpace.build({"a": list(range(10)), "b": [0, 1, 2]})


def drain(strategy, n):
    out = []
    while batch := strategy.ask(n):
        assert len(batch) <= n
        out.extend(batch)
        strategy.tell([Result(i, "ok", time_ms=1.0, score=1.0) for i in batch])
    return out


def test_available_lists_the_plugins():
    assert {"brute_force", "random_sample"} <= set(strategies.available())


def test_brute_force_covers_the_space_in_order():
    assert drain(strategies.create("brute_force", SPACE, 0, {}), 4) == list(range(30))


def test_brute_force_skips_what_the_cache_already_has():
    s = strategies.create("brute_force", SPACE, 0, {})
    s.tell([Result(i, "ok", score=1.0) for i in range(0, 30, 2)])
    assert drain(s, 7) == list(range(1, 30, 2))


@pytest.mark.parametrize("n", [1, 3, 30, 100])
def test_random_sample_never_repeats_and_is_seeded(n):
    a = drain(strategies.create("random_sample", SPACE, 5, {}), n)
    b = drain(strategies.create("random_sample", SPACE, 5, {}), n)
    c = drain(strategies.create("random_sample", SPACE, 6, {}), n)
    assert sorted(a) == list(range(30)) and a == b and a != c


def test_random_sample_fraction_and_known():
    s = strategies.create("random_sample", SPACE, 1, {"fraction": 0.5})
    s.tell([Result(i, "ok", score=1.0) for i in range(5)])
    got = drain(s, 4)
    assert len(got) <= 15 and not set(got) & set(range(5))


def test_bad_options_are_refused_with_the_strategy_name():
    with pytest.raises(ValueError, match="random_sample.*fraction"):
        strategies.create("random_sample", SPACE, 1, {"fraction": 2})
    with pytest.raises(ValueError, match="brute_force"):
        strategies.create("brute_force", SPACE, 1, {"population": 2})
