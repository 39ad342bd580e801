"""Rank 0's estimates of the device factors over a long run: each rests on every calibration so
far, so they are made once the calibrations have grown by a share since the last, and the work
of all of them stays in proportion to the calibrations (counted, not timed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_calibrating import reports

from mpitune.scheduling.devices.calibrating import REESTIMATE_GROWTH, Calibrating

CALIBRATIONS = 400


def test_the_estimates_of_a_long_run_cost_in_proportion_to_its_calibrations():
    calibrating = Calibrating(2, wanted=True)
    rng = np.random.default_rng(5)
    estimated_at = []
    for n in range(1, CALIBRATIONS + 1):
        if calibrating.record(reports([1.0, 1.1], 2.0, rng)):
            estimated_at.append(n)
    assert estimated_at[:8] == list(range(1, 9))  # the first few at once: they change the factors most
    # Each estimate judges every calibration so far: all of them together judge a bounded
    # multiple of the calibrations, not the n² / 2 = 80,000 that estimating at each would.
    judged = sum(estimated_at)
    assert judged <= (2 + 1 / REESTIMATE_GROWTH) * CALIBRATIONS, (judged, estimated_at)
    assert len(estimated_at) < 60
    assert all(b <= max(a + 1, a * (1 + REESTIMATE_GROWTH) + 1) for a, b in itertools.pairwise(estimated_at))
    assert calibrating.factor[1] / calibrating.factor[0] == pytest.approx(1.1, rel=0.005)


def test_launches_between_estimates_are_kept_for_the_next():
    calibrating = Calibrating(2, wanted=True)
    rng = np.random.default_rng(6)
    for _ in range(9):  # estimates at 1..9; the next at ceil(9 * 1.125) = 11
        calibrating.record(reports([1.0, 1.3], 2.0, rng))
    before = calibrating.estimate
    assert calibrating.record(reports([1.0, 1.3], 2.0, rng)) == ()  # the 10th: kept, not yet estimated
    assert calibrating.estimate is before
    after = calibrating.record(reports([1.0, 1.3], 2.0, rng))  # the 11th: an estimate of all eleven
    assert after and after is calibrating.estimate and after != before
    assert after[1].sd < before[1].sd * 1.2 and after[1].factor / after[0].factor == pytest.approx(1.3, rel=0.01)
