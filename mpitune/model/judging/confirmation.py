"""The statistics of confirmation: what the launches of candidates timed again say.

The search times each configuration once, on one device. So a median there carries that
device's bias and one draw of noise. The best of thousands is then partly the luckiest. So rank 0
times a few candidates again, round-robin over several rounds, on every device (model/work.py;
candidates.py chooses them). This module turns those launches into a verdict. It is numbers only,
with no I/O and no MPI. So every step can be checked on numbers drawn from a seeded generator.

Device factors. A device may be a few percent slower than another on every kernel. Clocks,
cooling or a neighbour can cause it. And the candidates' launches are spread over devices
unevenly once some fail on one of them. The model is multiplicative: log t[d, c, r] = a_c + b_d
+ noise. A device speeds every kernel up by the same ratio. Each step takes medians, not means.
So one slow launch, one odd candidate or one odd device moves nothing. m[d, c] is the median over
rounds. b_d is the median over candidates of how far device d sits from the other devices on
that candidate: m[d, c] minus the median over devices. Only candidates timed on every device
count, so each b_d is measured against the same set. The b are centred to mean 0 (factors of
geometric mean 1). The model cannot tell a slow kernel from a slow fleet. This choice keeps
calibrated times in the units of a typical device. A launch is calibrated by dividing it by its
device's factor. In a confirmation it is also divided by its round's shift on that device
(``_rounds_out``). A candidate's time is the median of all its calibrated launches pooled.

Bootstrap. The unit resampled is the round on one device. The launches of a round ran next to
each other in time, so drift (warming, throttling) hits them alike. Resampling whole rounds keeps
that pairing. So the comparison of two candidates is as sharp as the interleaving made it.
Devices are resampled independently, since their noise is. Every resample recomputes the factors
too. So the intervals carry the uncertainty of the calibration. A candidate's interval is the
percentile interval of its resampled medians. The winner is the lowest median. A candidate is
tied with it when the ratio of their medians falls at or below 1 in at least (1 - confidence) / 2
of the resamples. That is, the ratio's percentile interval includes 1. Then the launches do not
show that the winner is faster. The report should say so instead of naming one.

A device is flagged when its factor differs from the median device's by enough. Enough is more
than ``flag_z`` standard errors plus ``flag_pct`` %. The first term is beyond noise over all
devices (docs/analysis.md says how often alike ones are flagged). The second is beyond a
remark's worth: a few % between devices of one kind is usual. Of two devices only the slower can
be flagged. Each differs from the other alike. What sets a device apart slows it: throttling,
lower clocks, a host busy with other work.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from mpitune.model.work import Launch

# Most elements of one chunk of resamples (resamples x devices x candidates x rounds): tens of MB.
CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class Candidate:
    """One candidate as its confirmation launches show it."""

    config_id: int
    median_ms: float  # median of its calibrated launches (all devices pooled)
    ci_ms: tuple[float, float]  # bootstrap percentile CI of that median, at `confidence`
    launches: int  # finite launches counted


@dataclass(frozen=True)
class DeviceFactor:
    """How much slower one device ran the candidates than the common time."""

    rank: int
    factor: float  # this device's times / the common time; the geometric mean over devices is 1
    sd: float  # the factor's standard error (bootstrap)
    flagged: bool  # differs from the others' by more than its noise plus flag_pct percent


@dataclass(frozen=True)
class Verdict:
    """What confirmation concludes: the winner, the candidates it cannot be told from, the devices' factors."""

    winner: int  # config_id
    candidates: tuple[Candidate, ...]  # by median, winner first; a candidate with no finite launch left out
    tied: tuple[int, ...]  # ids statistically tied with the winner, winner excluded, in median order
    factors: tuple[DeviceFactor, ...]  # by rank; with one rank: factor 1.0, sd 0.0, not flagged
    # (a rank none of whose launches is finite is left out: it has no factor to tell)

    @property
    def winner_ms(self) -> float:
        return self.candidates[0].median_ms

    @property
    def ci_ms(self) -> tuple[float, float]:
        return self.candidates[0].ci_ms


def _nanmedian(a: np.ndarray, axis: int) -> np.ndarray:
    """The median along ``axis`` of the finite values, NaN where there is none.

    numpy's own nanmedian loops in Python over the other axes. Sorting moves NaN last. So the
    middle of the finite values can be picked for all of them at once.
    """
    s = np.sort(a, axis=axis)
    n = np.sum(np.isfinite(s), axis=axis, keepdims=True)
    lo = np.take_along_axis(s, np.maximum((n - 1) // 2, 0), axis=axis)
    hi = np.take_along_axis(s, n // 2, axis=axis)
    out = np.where(n > 0, (lo + hi) / 2, np.nan)
    return np.squeeze(out, axis=axis)


def _grid(
    rank: np.ndarray, config_id: np.ndarray, round_: np.ndarray, time_ms: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ranks, config ids, t[device, candidate, round]): the launches as one array.

    It is NaN where a launch failed or is missing. Times not finite and positive are failures;
    a log is taken of each. A candidate, rank or round without a finite launch is left out. It
    tells nothing. A rank where everything failed would otherwise leave no candidate timed on
    every device. Then the others would have no calibration.
    """
    rank, config_id, round_ = (np.asarray(x).astype(np.int64) for x in (rank, config_id, round_))
    times = np.asarray(time_ms, dtype=np.float64)
    if not rank.shape == config_id.shape == round_.shape == times.shape or rank.ndim != 1:
        raise ValueError("judge: rank, config_id, round_ and time_ms must be 1-d arrays of one length")
    good = np.isfinite(times) & (times > 0)
    ranks, d = np.unique(rank[good], return_inverse=True)
    ids, c = np.unique(config_id[good], return_inverse=True)
    _, r = np.unique(round_[good], return_inverse=True)
    grid = np.full((len(ranks), len(ids), int(r.max(initial=-1)) + 1), np.nan)
    cells = np.ravel_multi_index((d, c, r), grid.shape)
    if len(np.unique(cells)) != len(cells):
        raise ValueError("judge: a (rank, config_id, round) has more than one launch")
    grid[d, c, r] = times[good]
    return ranks, ids, grid


def _estimate(launches: np.ndarray, complete: np.ndarray, paired: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(log factors [sample, device], medians [sample, candidate]) of launches.

    Launches are [sample, device, candidate, round]. This is the model of the module docstring,
    for every sample at once. ``paired``: each device's rounds are taken out too (``_rounds_out``).
    """
    samples, devices, count, rounds = launches.shape
    logs = np.log(launches)
    if devices > 1 and complete.any():
        m = _nanmedian(logs[:, :, complete, :], axis=3)  # [sample, device, complete candidate]
        apart = m - _nanmedian(m, axis=1)[:, None, :]
        b = _nanmedian(apart, axis=2)
        b = b - np.nanmean(b, axis=1, keepdims=True)
    else:
        b = np.zeros((samples, devices))
    calibrated = launches / np.exp(b)[:, :, None, None]
    pooled = calibrated.transpose(0, 2, 1, 3).reshape(samples, count, devices * rounds)
    medians = _nanmedian(pooled, axis=2)
    if paired and np.count_nonzero(complete) > 1:
        pooled = _rounds_out(np.log(calibrated), np.log(medians), complete).transpose(0, 2, 1, 3)
        medians = np.exp(_nanmedian(pooled.reshape(samples, count, devices * rounds), axis=2))
    return b, medians


def _rounds_out(logs: np.ndarray, medians: np.ndarray, complete: np.ndarray) -> np.ndarray:
    """Calibrated log launches [sample, device, candidate, round] less each round's shift.

    The shift is the median, over the candidates timed on every device, of how far the round's
    launch sits from the candidate's pooled median (``medians``, log). A round's launches ran
    next to each other. What moved the device then moved them alike: a clock that stepped, a
    neighbour's job. With the shift out, candidates are compared within rounds, as the
    interleaving paired them. A candidate's median no longer hangs on how many of its launches
    fell on either side of a step.
    """
    apart = logs[:, :, complete, :] - medians[:, None, complete, None]
    shift = _nanmedian(apart, axis=2)  # [sample, device, round]
    return logs - np.where(np.isfinite(shift), shift, 0.0)[:, :, None, :]


def _bootstrap(
    grid: np.ndarray, complete: np.ndarray, rng: np.random.Generator, resamples: int, paired: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The estimates of ``resamples`` resamples of rounds, each device's drawn on its own.

    All draws are made first. So the chunking, for memory, does not change the numbers.
    """
    devices, count, rounds = grid.shape
    picks = rng.integers(0, rounds, size=(resamples, devices, rounds))
    chunk = max(1, CHUNK_ELEMENTS // max(1, grid.size))
    device, candidate = np.arange(devices)[None, :, None, None], np.arange(count)[None, None, :, None]
    bs, meds = [], []
    for start in range(0, resamples, chunk):
        p = picks[start : start + chunk, :, None, :]  # [sample, device, 1, round]
        launches = grid[device, candidate, p]  # [sample, device, candidate, round]
        b, med = _estimate(launches, complete, paired)
        bs.append(b)
        meds.append(med)
    return np.concatenate(bs), np.concatenate(meds)


def flag_z(devices: int) -> float:
    """Standard errors that flag a device among ``devices``: 5 % that noise flags any (Bonferroni)."""
    return NormalDist().inv_cdf(1 - 0.025 / max(1, devices))


def _factors(ranks: np.ndarray, b: np.ndarray, b_boot: np.ndarray, flag_pct: float) -> tuple[DeviceFactor, ...]:
    """Each device's factor, its bootstrap standard error and whether it stands out."""
    factors = np.exp(b)
    boot = np.exp(b_boot)
    ddof = 1 if len(boot) > 1 else 0
    sds = np.nanstd(boot, axis=0, ddof=ddof) if len(ranks) > 1 else np.zeros(len(ranks))
    out, z, median = [], flag_z(len(ranks)), float(np.median(factors))
    for d, rank in enumerate(ranks):
        flagged = False
        if len(ranks) > 1:
            if len(ranks) == 2:  # each is as far from the other: only the slower can be told
                apart = max(factors[d] / factors[1 - d] - 1, 0.0)
            else:  # the median device is typical; an outlier would shift the others' mean
                apart = factors[d] / median - 1
            flagged = bool(abs(apart) > z * sds[d] + flag_pct / 100)
        out.append(DeviceFactor(rank=int(rank), factor=float(factors[d]), sd=float(sds[d]), flagged=flagged))
    return tuple(out)


def _tied(order: np.ndarray, meds_boot: np.ndarray, confidence: float) -> tuple[int, ...]:
    """The columns of the candidates the resamples cannot tell from the winner.

    Columns are of ``meds_boot``, in ``order`` after the winner ``order[0]``. Such a candidate's
    ratio to the winner is at or below 1 in at least (1 - confidence) / 2 / (candidates - 1) of
    them. Naming the rest slower is one claim on every comparison at once. The winner was picked
    as the least of them. Bonferroni's share keeps the chance that any is wrong within 1 -
    confidence. A pair no resample could compare (never both finite) counts as tied.
    """
    w = order[0]
    tied = []
    level = (1.0 - confidence) / 2 / max(1, len(order) - 1)
    for c in order[1:]:
        ratio = meds_boot[:, c] / meds_boot[:, w]
        ratio = ratio[np.isfinite(ratio)]
        if len(ratio) == 0 or np.mean(ratio <= 1.0) >= level:
            tied.append(int(c))
    return tuple(tied)


def judge(
    rank: np.ndarray,
    config_id: np.ndarray,
    round_: np.ndarray,
    time_ms: np.ndarray,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    flag_pct: float = 2.0,
    resamples: int = 1000,
    paired: bool = True,
    intervals: bool = True,
) -> Verdict | None:
    """The verdict of one row per timed launch, in parallel arrays; NaN times (failed) left out.

    None when no candidate has a finite launch. ``paired``: a round's launches on one device ran
    together (confirmation's interleaving). So each round's shift is taken out. Not so where the
    "candidates" were timed apart (calibration's references). Without ``intervals`` the
    candidates' intervals are NaN and none is tied: the factors alone.
    """
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ValueError(f"judge: confidence must be in (0, 1) and resamples >= 1, not {confidence}, {resamples}")
    ranks, ids, grid = _grid(rank, config_id, round_, time_ms)
    if len(ids) == 0:
        return None
    finite = np.isfinite(grid)
    complete = finite.any(axis=2).all(axis=0)  # timed on every device
    b, meds = _estimate(grid[None], complete, paired)
    alpha = (1.0 - confidence) / 2
    with warnings.catch_warnings():
        # A resample may draw none of a sparse candidate's finite launches on a device, or at
        # all: that median is NaN and is left out of the summaries, which is what numpy warns of.
        warnings.simplefilter("ignore", RuntimeWarning)
        b_boot, meds_boot = _bootstrap(grid, complete, np.random.default_rng(seed), resamples, paired)
        both = np.nanquantile(meds_boot, [alpha, 1.0 - alpha], axis=0) if intervals else np.full((2, len(ids)), np.nan)
        lo, hi = both
        factors = _factors(ranks, b[0], b_boot, flag_pct)
    order = np.argsort(meds[0], kind="stable")
    counts = finite.sum(axis=(0, 2))
    found = tuple(  # config_id, median_ms, ci_ms, launches
        Candidate(int(ids[c]), float(meds[0, c]), (float(lo[c]), float(hi[c])), int(counts[c])) for c in order
    )
    return Verdict(
        winner=int(ids[order[0]]),
        candidates=found,
        tied=tuple(int(ids[c]) for c in _tied(order, meds_boot, confidence)) if intervals else (),
        factors=factors,
    )


def judge_launches(
    launches: Sequence[tuple[int, Launch]],
    *,
    seed: int = 0,
    flag_pct: float = 2.0,
    resamples: int = 1000,
    paired: bool = True,
) -> Verdict | None:
    """``judge`` of launches as the ranks report them, (rank, launch) each."""
    rank = np.array([r for r, _ in launches], dtype=np.int64)
    config_id = np.array([x.config_id for _, x in launches], dtype=np.int64)
    round_ = np.array([x.round for _, x in launches], dtype=np.int64)
    time_ms = np.array([x.time_ms for _, x in launches], dtype=np.float64)
    return judge(rank, config_id, round_, time_ms, seed=seed, flag_pct=flag_pct, resamples=resamples, paired=paired)
