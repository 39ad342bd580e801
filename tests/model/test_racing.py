"""The racing rule: when a configuration stops, and what the run learns from each result."""

import math

from mpitune.model.racing import RATIO_FLOOR, Race
from mpitune.model.result import Result


def test_a_configuration_stops_only_when_its_fastest_launch_is_beyond_the_ratio():
    race = Race(best_ms=1.0, ratio=1.3)
    assert race.lost([1.31]) and race.lost([1.5, 1.4])
    assert not race.lost([1.3]) and not race.lost([2.0, 1.2]) and not race.lost([])
    assert not Race().lost([1e9])  # nothing known yet: nothing to race against


def test_fully_timed_results_set_the_best_and_widen_the_ratio_and_others_do_not():
    race = Race().seen([Result(0, "ok", time_ms=2.0, times_ms=[2.0, 2.0, 3.0]),
                        Result(1, "ok", time_ms=4.0, times_ms=[4.0, 4.1, 4.0]),
                        Result(2, "ok", time_ms=0.5, times_ms=[0.5], raced=True),
                        Result(3, "verify_failed")])
    assert race == Race(best_ms=2.0, ratio=1.5)
    assert Race().seen([Result(0, "ok", time_ms=1.0, times_ms=[1.0, 1.01])]).ratio == RATIO_FLOOR
    assert Race().seen([Result(0, "ok", time_ms=math.nan)]) == Race()
