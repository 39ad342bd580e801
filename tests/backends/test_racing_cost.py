"""What racing costs per launch: its verdict after each launch does the same work however many
launches came before, so a configuration of 10^5 launches races in time proportional to 10^5,
not to its square (which took longer than the configuration's deadline)."""

import h5py
import pytest
from conftest import mpitune, report_json, write_scale_spec

from mpitune.backends.base import timed_launches
from mpitune.model.judging.racing import Race, RaceRule


class Counted(float):
    """A launch's time that counts every comparison made with it: the race's work."""

    comparisons = 0

    def _count(self, other, op):
        Counted.comparisons += 1
        return op(float(self), float(other))

    def __gt__(self, other):
        return self._count(other, float.__gt__)

    def __lt__(self, other):
        return self._count(other, float.__lt__)

    def __ge__(self, other):
        return self._count(other, float.__ge__)

    def __le__(self, other):
        return self._count(other, float.__le__)


def comparisons(race: Race, iterations: int, time_ms: float) -> tuple[int, int, bool]:
    """(comparisons made, launches made, raced) of ``iterations`` launches of ``time_ms`` each."""
    Counted.comparisons = 0
    times, raced = timed_launches(lambda: Counted(time_ms), iterations, race)
    return Counted.comparisons, len(times), raced


@pytest.mark.parametrize("rule", list(RaceRule))
def test_a_surviving_configuration_costs_the_race_one_comparison_per_launch(rule):
    race = Race(best_ms=1.0, ratio=1.3, rule=rule)
    for iterations in (1_000, 4_000):  # a verdict on the whole list made 8 x 10^6 at 4,000
        count, launches, raced = comparisons(race, iterations, 1.0)
        assert (launches, raced) == (iterations, False)
        assert count <= 2 * iterations, (rule, iterations, count)


def test_a_losing_configuration_stops_where_it_did_and_costs_one_comparison_per_launch():
    # Majority: every launch beyond the bound, so it stops once more than half of them are.
    count, launches, raced = comparisons(Race(best_ms=1.0, ratio=1.3, rule=RaceRule.MAJORITY), 4_001, 2.0)
    assert (launches, raced) == (2_001, True) and count <= 2 * launches
    # Spread: the first launch beyond the bound stops it.
    count, launches, raced = comparisons(Race(best_ms=1.0, ratio=1.3, rule=RaceRule.SPREAD), 4_000, 2.0)
    assert (launches, raced) == (1, True) and count <= 2


def test_the_standing_kept_launch_by_launch_agrees_with_the_verdict_on_the_whole_list():
    """The incremental verdict is the rule of model/judging/racing.py, launch by launch: checked on
    every sequence of launches of four values and every rule."""
    import itertools

    for rule in RaceRule:
        race = Race(best_ms=1.0, ratio=1.3, rule=rule)
        for iterations in (1, 2, 3, 4, 5):
            for times in itertools.product([0.9, 1.3, 1.31, 5.0], repeat=iterations):
                standing = race.standing(iterations)
                for got, t in enumerate(times, 1):
                    beyond = [x > 1.3 for x in times[:got]]
                    expected = sum(beyond) > iterations // 2 if rule is RaceRule.MAJORITY else all(beyond)
                    assert standing.add(t) is expected, (rule, times, got)


def test_a_hundred_thousand_launches_of_a_microsecond_kernel_are_timed_whole_on_two_ranks(tmp_path):
    """The issue's case: at 10^5 iterations, racing on (the default), every healthy
    configuration is measured (none a timeout), each fully timed one with all its launches."""
    spec = write_scale_spec(tmp_path, extra="iterations = 100_000\n")
    out = mpitune(2, [str(spec), "--confirm", "0", "--no-calibrate"], tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = report_json(tmp_path / "spec.h5")
    assert (report["ok"], report["failed"]) == (4, {}), report["failed"]
    with h5py.File(tmp_path / "spec.h5", "r") as f:
        rows = f["results"][...]
    full = rows[rows["raced"] == 0]
    assert len(full) >= 1 and set(full["launches"]) == {100_000}
