"""The racing rule: when a configuration stops, and what the run learns from each result."""

import math

import numpy as np
import pytest

from mpitune.model.judging.racing import RATIO_FLOOR, Race, RaceRule
from mpitune.model.result import Result


def test_a_configuration_stops_once_most_of_its_launches_are_beyond_the_ratio():
    race = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.MAJORITY)
    assert race.lost([1.31, 1.4], iterations=3) and race.lost([1.5, 1.2, 1.4, 1.6], iterations=7) is False
    assert race.lost([1.5, 1.4, 1.6, 2.0], iterations=7) and race.lost([1.31], iterations=1)
    assert not race.lost([1.31], iterations=3)  # one slow launch is no verdict: the other two may be fast
    assert not race.lost([1.3, 1.3], iterations=3) and not race.lost([2.0, 1.2], iterations=3)
    assert not race.lost([], iterations=3)
    assert not Race(rule=RaceRule.MAJORITY).lost([1e9, 1e9], iterations=3)  # nothing known yet: nothing to race against


def test_a_raced_configuration_could_not_have_been_the_best_whatever_its_other_launches():
    """The rule's promise, checked on every way the launches it did not get could have gone."""
    import itertools

    race = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.MAJORITY)
    values = [0.1, 1.0, 1.31, 5.0]
    for iterations in (1, 2, 3, 4, 5):
        for times in itertools.product(values, repeat=iterations):
            for got in range(1, iterations + 1):
                if race.lost(list(times[:got]), iterations):
                    assert sorted(times)[(iterations - 1) // 2] > race.best_ms, (times, got)


def test_fully_timed_results_set_the_best_and_widen_the_ratio_and_others_do_not():
    race = Race().after(
        [
            Result(0, "ok", time_ms=2.0, times_ms=[2.0, 2.0, 3.0]),
            Result(1, "ok", time_ms=4.0, times_ms=[4.0, 4.1, 4.0]),
            Result(2, "ok", time_ms=0.5, times_ms=[0.5], raced=True),
            Result(3, "verify_failed"),
        ]
    )
    assert race == Race(best_ms=2.0, ratio=1.5)
    assert Race().after([Result(0, "ok", time_ms=1.0, times_ms=[1.0, 1.01])]).ratio == RATIO_FLOOR
    assert Race().after([Result(0, "ok", time_ms=math.nan)]) == Race()


def test_the_spread_rule_stops_on_the_first_launch_beyond_the_bound_and_never_on_a_fast_one():
    race = Race(best_ms=1.0, ratio=1.3, rule=RaceRule.SPREAD)
    assert race.lost([1.31], iterations=7)  # the majority rule would need four such launches
    assert not race.lost([1.31, 1.29], iterations=7) and not race.lost([1.3], iterations=7)
    assert not race.lost([], iterations=7)
    assert race.after([Result(0, "ok", time_ms=0.5, times_ms=[0.5, 0.6, 0.5])]).rule is RaceRule.SPREAD


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


def test_the_first_rule_is_the_default_and_stops_on_a_first_launch_beyond_the_first_ratio():
    assert Race().rule is RaceRule.FIRST
    race = Race(best_ms=1.0, ratio=1.3, first_ratio=1.6)
    assert race.first_bound_ms == 1.6  # the larger of the two ratios x the best
    assert race.lost_first(1.61) and not race.lost_first(1.6) and not race.lost_first(1.5)
    assert not race.lost_first(math.nan)  # a first launch that was not timed stops nothing
    assert Race(best_ms=1.0, ratio=1.7, first_ratio=1.4).first_bound_ms == 1.7  # never below the spread
    assert not Race(first_ratio=1.0).lost_first(1e9)  # nothing known yet: nothing to race against
    for rule in (RaceRule.MAJORITY, RaceRule.SPREAD):  # the other rules never stop on the first launch
        assert not Race(best_ms=1.0, ratio=1.3, rule=rule).lost_first(100.0)
    # Once its first launch survived, a configuration is raced as under the spread rule.
    assert race.lost([1.31], iterations=7) and not race.lost([1.31, 1.29], iterations=7)


def test_fully_timed_results_teach_the_first_ratio_and_raced_or_untimed_ones_do_not():
    race = Race().after(
        [
            Result(0, "ok", time_ms=2.0, times_ms=(2.0, 2.1, 2.0), first_ms=3.6),  # first launch 1.8 x its median
            Result(1, "ok", time_ms=4.0, times_ms=(4.0, 4.1, 4.0), first_ms=4.4),
            Result(2, "ok", time_ms=9.0, times_ms=(9.0,), raced=True, first_ms=90.0),  # stopped: tells nothing
            Result(3, "ok", time_ms=5.0, times_ms=(5.0, 5.0, 5.0)),  # read back from a file: no first launch
        ]
    )
    assert race.best_ms == 2.0 and race.first_ratio == pytest.approx(1.8) and race.ratio == RATIO_FLOOR
    assert race.first_bound_ms == pytest.approx(3.6)
    assert Race().after([Result(0, "ok", time_ms=1.0, times_ms=(1.0, 1.0), first_ms=1.1)]).first_ratio == RATIO_FLOOR
    # A rank's race learns it as it goes, and passes the rule and the ratio on.
    assert race.after([Result(4, "ok", time_ms=1.0, times_ms=(1.0, 1.0), first_ms=1.0)]) == Race(
        best_ms=1.0, ratio=RATIO_FLOOR, first_ratio=pytest.approx(1.8)
    )


def test_under_the_first_rule_a_configuration_no_colder_than_the_run_could_not_have_been_the_best():
    """The first rule's promise: if a configuration's first launch is no more than ``first_ratio``
    x its median (as cold as the run has measured, at most), a first launch beyond
    ``first_ratio`` x the best proves its median slower than the best."""
    race = Race(best_ms=1.0, ratio=1.3, first_ratio=1.5)
    for first in np.linspace(0.5, 3.0, 51):
        for median in np.linspace(0.5, 3.0, 51):
            if first > race.first_ratio * median:
                continue  # colder than the run has seen: outside the rule's promise
            if race.lost_first(float(first)):
                assert median > race.best_ms, (first, median)
