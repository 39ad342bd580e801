"""What the two baselines promise beyond the contract: Cartesian order, and a seeded
permutation that stops after ``fraction`` of the space."""

from records import scored
from search_problems import TINY, make, run


def test_brute_force_covers_the_space_in_order():
    assert run(make("brute_force", TINY), 4, 10**6, float) == list(range(len(TINY)))


def test_brute_force_skips_what_the_cache_already_has():
    s = make("brute_force", TINY)
    s.tell([scored(i, time_ms=1.0) for i in range(0, len(TINY), 2)])
    assert run(s, 3, 10**6, float) == list(range(1, len(TINY), 2))


def test_random_sample_walks_the_permutation_random_unseen_falls_back_on():
    """One seeded random design: a searcher's last-resort filler is random sampling's order."""
    fallback = make("brute_force", TINY, seed=5).random_unseen(len(TINY))
    assert run(make("random_sample", TINY, seed=5), 4, 10**6, float) == fallback


def test_random_sample_fraction_and_known():
    s = make("random_sample", TINY, seed=1, fraction=0.5)
    s.tell([scored(i, time_ms=1.0) for i in range(3)])
    got = run(s, 4, 10**6, float)
    assert len(got) <= len(TINY) // 2 and not set(got) & set(range(3))
