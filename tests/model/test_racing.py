"""The racing rule: when a configuration stops, and what the run learns from each result."""

import math

from mpitune.model.racing import RATIO_FLOOR, Race
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
