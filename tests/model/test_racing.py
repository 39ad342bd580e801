"""The racing rule: when a configuration stops, and what the run learns from each result."""

import math

from mpitune.model.racing import RATIO_FLOOR, Race, RaceRule
from mpitune.model.result import Result


def test_a_configuration_stops_once_most_of_its_launches_are_beyond_the_ratio():
    race = Race(best_ms=1.0, ratio=1.3)
    assert race.lost([1.31, 1.4], iterations=3) and race.lost([1.5, 1.2, 1.4, 1.6], iterations=7) is False
    assert race.lost([1.5, 1.4, 1.6, 2.0], iterations=7) and race.lost([1.31], iterations=1)
    assert not race.lost([1.31], iterations=3)  # one slow launch is no verdict: the other two may be fast
    assert not race.lost([1.3, 1.3], iterations=3) and not race.lost([2.0, 1.2], iterations=3)
    assert not race.lost([], iterations=3)
    assert not Race().lost([1e9, 1e9], iterations=3)  # nothing known yet: nothing to race against


def test_a_raced_configuration_could_not_have_been_the_best_whatever_its_other_launches():
    """The rule's promise, checked on every way the launches it did not get could have gone."""
    import itertools

    race = Race(best_ms=1.0, ratio=1.3)
    values = [0.1, 1.0, 1.31, 5.0]
    for iterations in (1, 2, 3, 4, 5):
        for times in itertools.product(values, repeat=iterations):
            for got in range(1, iterations + 1):
                if race.lost(list(times[:got]), iterations):
                    assert sorted(times)[(iterations - 1) // 2] > race.best_ms, (times, got)


def test_fully_timed_results_set_the_best_and_widen_the_ratio_and_others_do_not():
    race = Race().seen(
        [
            Result(0, "ok", time_ms=2.0, times_ms=[2.0, 2.0, 3.0]),
            Result(1, "ok", time_ms=4.0, times_ms=[4.0, 4.1, 4.0]),
            Result(2, "ok", time_ms=0.5, times_ms=[0.5], raced=True),
            Result(3, "verify_failed"),
        ]
    )
    assert race == Race(best_ms=2.0, ratio=1.5)
    assert Race().seen([Result(0, "ok", time_ms=1.0, times_ms=[1.0, 1.01])]).ratio == RATIO_FLOOR
    assert Race().seen([Result(0, "ok", time_ms=math.nan)]) == Race()


def test_the_spread_rule_stops_on_the_first_launch_beyond_the_bound_and_never_on_a_fast_one():
    race = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.SPREAD)
    assert race.lost([1.31], iterations=7)  # the majority rule would need four such launches
    assert not race.lost([1.31, 1.29], iterations=7) and not race.lost([1.3], iterations=7)
    assert not race.lost([], iterations=7)
    assert race.seen([Result(0, "ok", time_ms=0.5, times_ms=[0.5, 0.6, 0.5])]).rule is RaceRule.SPREAD


def test_under_the_spread_rule_a_raced_configuration_no_noisier_than_the_run_could_not_have_been_the_best():
    """The spread rule's promise: if no launch of a configuration exceeds ``ratio`` x its median
    (the noise the run measured), one launch beyond ``ratio`` x the best proves its median slower."""
    import itertools

    race = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.SPREAD)
    values = [0.9, 1.0, 1.2, 1.35, 1.6, 2.0]
    for iterations in (1, 3, 5):
        for times in itertools.product(values, repeat=iterations):
            median = sorted(times)[(iterations - 1) // 2]
            if max(times) > race.ratio * median:
                continue  # noisier than the run has seen: outside the rule's promise
            for got in range(1, iterations + 1):
                if race.lost(list(times[:got]), iterations):
                    assert median > race.best_ms, (times, got)
