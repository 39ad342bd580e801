"""Calibration during the search: a reference timed on every rank now and then, the ranks'
factors estimated from it, and the search comparing calibrated times while the file keeps raw
ones. Real rounds over replay backends in one process (test_manager's world), and rank 0's
Calibrating fed real reports."""

from __future__ import annotations

import itertools
import math

import h5py
import numpy as np
import pytest
from test_confirming import biased
from test_manager import Ranks

from mpitune.model.result import Scored, Status
from mpitune.model.work import Launch, Work
from mpitune.scheduling.devices.calibrating import EVERY_BATCHES, ROUNDS, Calibrating
from mpitune.scheduling.messages import Report

BIAS = (1.0, 1.01, 0.995, 1.15)


def test_every_rank_times_the_reference_and_the_factors_come_out(tmp_path):
    ranks = biased(Ranks(tmp_path, 4, strategy="brute_force", confirm=0), BIAS)
    manager = ranks.open()
    ranks.run(manager)
    calibrated = [o for orders in ranks.orders for o in orders[:1] if o.calibrate is not None]
    assert calibrated and all(o.calibrate.rounds == ROUNDS for o in calibrated)
    batches = [o.batch for o in calibrated]
    assert all(b - a >= EVERY_BATCHES for a, b in itertools.pairwise(batches))
    with h5py.File(ranks.cache_path, "r") as f:
        retimed, factors, results = f["retimed"][...], f["device_factors"][...], f["results"][...]
    assert set(retimed["purpose"]) == {b"calibrate"} and sorted(set(retimed["rank"])) == [0, 1, 2, 3]
    assert len(retimed) == len(batches) * 4 * ROUNDS
    last = factors[factors["batch"] == factors["batch"].max()]
    assert np.allclose(last["factor"] / last["factor"][0], BIAS, rtol=1e-9)  # launches recorded alike: exact
    assert last["flagged"].tolist() == [0, 0, 0, 1]
    # The file keeps every time as its rank measured it; the search compared them calibrated.
    best = manager.space.config(manager.best.config_id)
    assert (best["x"], best["y"]) == (8, 5)
    row = results[results["config_id"] == manager.best.config_id][0]
    assert row["time_ms"] == pytest.approx(2.5 * BIAS[row["rank"]], rel=1e-12)
    common = float(np.prod(BIAS) ** 0.25)
    assert manager.best.score == pytest.approx(2.5 * common, rel=1e-9)


def test_each_rank_races_against_the_best_in_its_own_devices_time(tmp_path):
    ranks = biased(Ranks(tmp_path, 4, strategy="brute_force", confirm=0, batch_size=4), BIAS)
    ranks.run(ranks.open())
    orders = ranks.orders[-1]  # long after the first calibration was recorded
    best = [o.race.best_ms for o in orders]
    assert np.allclose(np.array(best) / best[0], BIAS, rtol=1e-9)


def scored(config_id: int, time_ms: float, rank: int) -> Scored:
    return Scored(config_id, Status.OK, time_ms, (time_ms,) * 3, compile_s=0.1, rank=rank, scores=(time_ms,))


def reports(factors: list[float], time_ms: float, rng: np.random.Generator) -> list[Report]:
    return [
        Report(
            (),
            (),
            0.0,
            calibration=tuple(Launch(0, r, time_ms * f * (1 + 0.002 * rng.standard_normal())) for r in range(ROUNDS)),
        )
        for f in factors
    ]


def test_a_reference_is_due_once_a_result_passed_then_every_few_batches_while_it_stays_cheap():
    calibrating = Calibrating(2, wanted=True)
    work = lambda i: Work(i, {"x": i})
    assert calibrating.reference(0, 1.0, None, work) is None  # nothing passed yet
    calibrating.observe([scored(7, 1.0, rank=1)])
    first = calibrating.reference(2, 1.0, None, work)
    assert first is not None and first.ids == (7,)  # the first, however costly the run is so far
    calibrating.record(reports([1.0, 1.0], 1.0, np.random.default_rng(0)))
    assert calibrating.reference(3, 1000.0, scored(9, 0.5, 0), work) is None  # too soon
    later = calibrating.reference(2 + EVERY_BATCHES, 1000.0, scored(9, 0.5, 0), work)
    assert later is not None and later.ids == (9,)  # then the best so far
    calibrating.record(reports([1.0, 1.0], 1.0, np.random.default_rng(1)))
    assert calibrating.reference(2 + 2 * EVERY_BATCHES, 1.0, scored(9, 0.5, 0), work) is None  # beyond 2 % of 1 s


def test_one_rank_and_another_objective_calibrate_nothing():
    for calibrating in (Calibrating(1, wanted=True), Calibrating(4, wanted=False)):
        calibrating.observe([scored(7, 1.0, rank=0)])
        assert calibrating.reference(8, 1e6, None, lambda i: Work(i, {})) is None


def test_a_device_that_drifts_is_flagged(caplog):
    calibrating = Calibrating(3, wanted=True)
    rng = np.random.default_rng(3)
    for event in range(6):
        drift = 1.0 if event < 3 else 1.12  # rank 2 slows down a third of the way in
        calibrating.record(reports([1.0, 1.0, drift], 2.0, rng))
    assert [f.flagged for f in calibrating.estimate] == [False, False, True]
    assert "rank 2's device drifts" in caplog.text or "rank 2's device times" in caplog.text
    steady = Calibrating(3, wanted=True)
    for _ in range(6):
        steady.record(reports([1.0, 1.005, 0.995], 2.0, rng))
    assert not any(f.flagged for f in steady.estimate)


def test_launches_missing_from_a_rank_leave_the_estimate_as_it_was():
    calibrating = Calibrating(2, wanted=True)
    whole = reports([1.0, 1.1], 1.0, np.random.default_rng(4))
    assert calibrating.record(whole)
    partial = [whole[0], Report((), (), 0.0, calibration=tuple(Launch(0, r, math.nan) for r in range(ROUNDS)))]
    assert calibrating.record(partial) == ()
    assert calibrating.factor[1] / calibrating.factor[0] == pytest.approx(1.1, rel=0.01)
