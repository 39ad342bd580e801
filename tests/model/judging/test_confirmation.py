"""Confirmation's statistics on launches drawn from seeded generators: the device factors, the
winner and the candidates tied with it (which candidates are timed again: test_candidates.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpitune.model.judging.confirmation import flag_z, judge


def launches(true_ms, biases, rounds, noise, seed, ids=None):
    """(rank, config_id, round, time_ms): every candidate once per round on every device, its
    true time x the device's bias x lognormal noise of relative size ``noise``."""
    rng = np.random.default_rng(seed)
    ids = list(range(len(true_ms))) if ids is None else ids
    d, c, r = np.meshgrid(np.arange(len(biases)), np.arange(len(true_ms)), np.arange(rounds), indexing="ij")
    times = np.asarray(true_ms)[c] * np.asarray(biases)[d] * np.exp(noise * rng.standard_normal(d.shape))
    return d.ravel(), np.asarray(ids)[c.ravel()], r.ravel(), times.ravel()


def test_a_clear_winner_is_named_and_nothing_is_tied():
    true = [1.05, 1.0, 1.1025]  # 5 % apart
    rank, ids, rounds, times = launches(true, [1.0, 1.0], rounds=10, noise=0.01, seed=1, ids=[7, 3, 9])
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert verdict.winner == 3 and verdict.tied == ()
    assert [c.config_id for c in verdict.candidates] == [3, 7, 9]
    assert [c.launches for c in verdict.candidates] == [20, 20, 20]
    lo, hi = verdict.ci_ms
    assert lo <= verdict.winner_ms <= hi and hi - lo < 0.02
    assert verdict.winner_ms == pytest.approx(1.0, rel=0.01)
    assert verdict.candidates[1].median_ms == pytest.approx(1.05, rel=0.01)


def test_candidates_a_tenth_of_a_percent_apart_in_two_percent_noise_are_tied():
    rank, ids, rounds, times = launches([1.0, 1.001, 1.05], [1.0, 1.0], rounds=10, noise=0.02, seed=2)
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert {verdict.winner, *verdict.tied} == {0, 1}  # either may come first: the launches cannot tell
    assert 2 not in verdict.tied  # 5 % in that noise can be told


def test_resampling_whole_rounds_keeps_a_drift_from_hiding_a_one_percent_gap():
    """Times rise 20 % over the rounds, alike for both candidates (they ran side by side): a
    resample of rounds moves both medians together, so their ratio stays sharp. Resampling
    each candidate's launches on its own would see the drift as noise and call them tied."""
    rank, ids, rounds, times = launches([1.0, 1.01], [1.0], rounds=20, noise=0.002, seed=3)
    times = times * (1.0 + 0.01 * rounds)
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert verdict.winner == 0 and verdict.tied == ()
    lo, hi = verdict.ci_ms
    assert hi / lo > 1.03  # each median alone is as unsure as the drift makes it


def test_device_factors_are_recovered():
    biases = np.array([0.97, 1.0, 1.01, 1.04])
    rank, ids, rounds, times = launches(np.linspace(1.0, 1.3, 8), biases, rounds=20, noise=0.01, seed=4)
    verdict = judge(rank + 10, ids, rounds, times)
    assert verdict is not None
    assert [f.rank for f in verdict.factors] == [10, 11, 12, 13]
    factors = np.array([f.factor for f in verdict.factors])
    expected = biases / np.exp(np.mean(np.log(biases)))
    assert np.allclose(factors, expected, rtol=0.005)
    assert math.prod(factors) == pytest.approx(1.0, abs=1e-12)
    assert all(0 < f.sd < 0.005 for f in verdict.factors)
    assert verdict.winner == 0 and verdict.tied == ()


def test_a_device_eight_percent_slow_is_flagged_and_the_others_not():
    biases = [1.0, 0.995, 1.005, 1.08, 1.0]
    rank, ids, rounds, times = launches(np.linspace(1.0, 1.2, 6), biases, rounds=20, noise=0.01, seed=5)
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert [f.flagged for f in verdict.factors] == [False, False, False, True, False]
    assert verdict.factors[3].factor / verdict.factors[0].factor == pytest.approx(1.08, rel=0.005)


@pytest.mark.parametrize("biases,flagged", [([1.0, 1.08], [False, True]), ([1.08, 1.0], [True, False])])
def test_of_two_devices_only_the_slower_is_flagged(biases, flagged):
    rank, ids, rounds, times = launches(np.linspace(1.0, 1.2, 5), biases, rounds=10, noise=0.01, seed=2)
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert [f.flagged for f in verdict.factors] == flagged


def test_the_true_best_wins_once_the_device_bias_is_taken_out():
    """Candidate 0 (1.00 ms) launched only on the slowest device, failing on the others;
    candidate 1 (1.02 ms) everywhere. Pooled as measured, 1 is faster; calibrated, 0 is."""
    biases = [0.97, 1.0, 1.01, 1.04]
    rank, ids, rounds, times = launches([1.0, 1.02, 1.05, 1.08], biases, rounds=20, noise=0.01, seed=6)
    times = np.where((ids == 0) & (rank != 3), np.nan, times)
    raw = {c: np.nanmedian(times[ids == c]) for c in (0, 1)}
    assert raw[1] < raw[0]  # the naive reading picks the wrong one
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert verdict.winner == 0 and verdict.tied == ()
    assert verdict.candidates[0].launches == 20
    assert verdict.candidates[1].median_ms / verdict.winner_ms == pytest.approx(1.02, rel=0.005)
    # Every candidate on every device: the true best still wins, and the factors are the same.
    full = launches([1.0, 1.02, 1.05, 1.08], biases, rounds=20, noise=0.01, seed=6)
    every = judge(*full)
    assert every is not None and every.winner == 0
    assert [f.factor for f in every.factors] == pytest.approx([f.factor for f in verdict.factors], rel=0.003)


def test_failed_launches_are_left_out_and_all_failed_is_no_verdict():
    rank, ids, rounds, times = launches([1.0, 1.1, 0.5], [1.0, 1.02], rounds=8, noise=0.01, seed=7)
    times = np.where(ids == 2, np.nan, times)  # the fastest failed everywhere
    times[(ids == 1) & (rounds < 3)] = np.nan  # some launches of another failed
    verdict = judge(rank, ids, rounds, times)
    assert verdict is not None
    assert [c.config_id for c in verdict.candidates] == [0, 1] and verdict.winner == 0
    assert [c.launches for c in verdict.candidates] == [16, 10]
    # A third rank where everything failed has no factor, and the other two are still calibrated.
    dead = judge(np.r_[rank, 2, 2], np.r_[ids, 0, 1], np.r_[rounds, 0, 0], np.r_[times, np.nan, np.nan])
    assert dead is not None and [f.rank for f in dead.factors] == [0, 1]
    assert dead.factors[1].factor / dead.factors[0].factor == pytest.approx(1.02, rel=0.01)
    assert dead == verdict
    assert judge(rank, ids, rounds, np.full_like(times, np.nan)) is None
    assert judge(np.array([], int), np.array([], int), np.array([], int), np.array([])) is None


def test_the_launches_must_be_one_per_rank_candidate_and_round():
    rank, ids, rounds, times = launches([1.0, 1.1], [1.0], rounds=3, noise=0.01, seed=8)
    with pytest.raises(ValueError, match="more than one launch"):
        judge(np.r_[rank, 0], np.r_[ids, 0], np.r_[rounds, 0], np.r_[times, 1.0])
    with pytest.raises(ValueError, match="one length"):
        judge(rank, ids, rounds, times[:-1])


def test_the_same_seed_gives_the_same_verdict():
    data = launches([1.0, 1.004, 1.03], [1.0, 1.01, 0.99], rounds=12, noise=0.02, seed=9)
    first, again, other = judge(*data, seed=5), judge(*data, seed=5), judge(*data, seed=6)
    assert first is not None and other is not None
    assert first == again
    assert other.winner == first.winner and other.ci_ms != first.ci_ms  # only the resamples differ


def test_one_device_has_factor_one_and_no_noise():
    verdict = judge(*launches([1.0, 1.2], [1.3], rounds=6, noise=0.05, seed=10))
    assert verdict is not None
    (factor,) = verdict.factors
    assert (factor.rank, factor.factor, factor.sd, factor.flagged) == (0, 1.0, 0.0, False)
    assert verdict.winner == 0 and verdict.winner_ms == pytest.approx(1.3, rel=0.1)


@pytest.mark.parametrize("seed", [14, 31, 47])
def test_rounds_are_compared_within_so_a_clock_step_does_not_pick_the_winner(seed):
    """Every device runs at one of two clocks, 7 % apart, and each round falls at a moment of its
    own (``place``); each candidate runs slow at the moments past its own step, as the replay of
    convolution_A4000's recorded launches makes it. Candidate 0 is the fastest by its median
    (fast 69 % of the time, at 1.0; candidate 2 fast 78 % of the time, at 1.004). Pooled medians
    of 40 launches a candidate, with 5 % device bias, can land 2's below 0's; compared within
    rounds, 0 wins, and 2 stays tied with it: the two cannot be told apart in 40 launches."""
    fast = np.array([1.0, 1.004, 1.004, 1.006, 1.011, 1.03])
    step = np.array([0.69, 0.62, 0.78, 0.53, 0.66, 0.5])
    rng = np.random.default_rng(seed)
    place = rng.random((8, 1, 5))  # [device, 1, round]: a round's launches ran at one moment
    bias = rng.uniform(0.95, 1.05, size=(8, 1, 1))
    times = np.where(place < step[None, :, None], 1.0, 1.07) * fast[None, :, None] * bias
    times *= np.exp(0.001 * rng.standard_normal(times.shape))
    d, c, r = np.meshgrid(np.arange(8), np.arange(len(fast)), np.arange(5), indexing="ij")
    rows = (d.ravel(), c.ravel(), r.ravel(), times.ravel())
    pooled = judge(*rows, seed=seed, resamples=100, paired=False)
    paired = judge(*rows, seed=seed, resamples=100)
    assert pooled.winner == 2 and 0 in pooled.tied
    assert paired.winner == 0 and 2 in paired.tied


def test_a_confirmation_finished_by_another_run_on_other_devices_still_names_the_best():
    """A stop cut a confirmation short after 2 of its 6 rounds; the run that finished it got
    other devices under the same rank numbers, 8 % slower on rank 0 and 6 % faster on rank 1,
    and timed rounds 2 to 5. Each round's shift on its rank is taken out, so the change of
    device counts as a clock that stepped: the 1 % faster candidate still wins, and one 5 %
    slower is not tied with it."""
    rng = np.random.default_rng(3)
    true = np.array([1.0, 1.01, 1.05])
    rows = []
    for rank, later in ((0, 1.08), (1, 0.94)):
        for round_ in range(6):
            device = 1.0 if round_ < 2 else later
            for c, t in enumerate(true):
                rows.append((rank, c, round_, t * device * math.exp(0.001 * rng.standard_normal())))
    v = judge(*(np.array(col) for col in zip(*rows)), seed=0, resamples=300)
    assert v is not None and v.winner == 0 and 2 not in v.tied
    assert [c.launches for c in v.candidates] == [12, 12, 12]


def test_a_healthy_fleet_of_256_devices_has_no_device_flagged_and_a_slow_one_still_is():
    """A calibration's one reference, 5 rounds in 5 % noise, on 256 alike devices: two standard
    errors a device flagged 2 to 7 of them a draw; the threshold over all devices flags none. A
    device 10 % slow among 64 is still flagged, alone."""
    assert flag_z(2) == pytest.approx(2.241, abs=1e-3) and flag_z(256) == pytest.approx(3.725, abs=1e-3)
    for seed in range(3):
        rank, ids, rounds, times = launches([1.0], [1.0] * 256, rounds=5, noise=0.05, seed=seed)
        verdict = judge(rank, ids, rounds, times, seed=seed)
        assert verdict is not None and not any(f.flagged for f in verdict.factors)
    biases = [1.0] * 64
    biases[17] = 1.10
    rank, ids, rounds, times = launches(np.linspace(1.0, 1.2, 10), biases, rounds=5, noise=0.02, seed=9)
    verdict = judge(rank, ids, rounds, times, seed=9)
    assert verdict is not None and [f.rank for f in verdict.factors if f.flagged] == [17]
