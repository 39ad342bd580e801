"""Which candidates a confirmation times again, chosen from the search's results.

The search times each configuration once, on one device. So a median there carries that
device's bias and one draw of noise. The best of thousands is then partly the luckiest. So rank 0
times a few candidates again on every device, and confirmation.py judges their launches. It is
numbers only, with no I/O and no MPI.

Which candidates (``candidates``). The k best by their search median join. So does any whose
interval for the median overlaps the best's. The search cannot tell those from the best, so
leaving them out would let its noise choose. The interval is the order-statistic one
(``search_interval_ms``). It assumes nothing of the launches' distribution: kernel times are
skewed, with rare slow launches. It assumes only that they are independent draws. So the count
of launches below the true median is binomial(n, 1/2). A raced result has only the few launches
that showed it slow. Its median is biased upwards. So it joins if even its wide interval
overlaps. It also joins if it stopped near the race's bound (within ``NEAR_BOUND``; the k
nearest). The default race stops a configuration on its first launch alone. It trusts that no
first launch runs colder than the run has measured (model/judging/racing.py). A first launch a
little colder could stop the best just beyond the bound. Only k of those join. On real spaces
many configurations stop just beyond the bound (docs/performance.md, "Racing"). Each candidate
costs a compile and a slot in every round.

With several devices, the search's times are calibrated (scheduling/devices/calibrating.py).
Each is divided by its rank's estimated factor. The factor's error moves every result of that
rank alike. An interval for a calibrated median must carry that error too. Else a factor a few
tenths of a percent high pushes the true best out of the candidates, with intervals that look
sure. It may push a slower one in, too. So each side of an interval, in log time from the
median, is combined in quadrature with its factor's own half-width at the same confidence.
``factor_sd`` is the estimate's relative bootstrap standard error. The launches' noise and the
factor's error are independent. For two intervals alike, the overlap is then the same test as
before. It is made on a difference whose variance has both factors' in it. Within one rank the
factor's error cancels. Counting it there only errs towards one more candidate.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from mpitune.model.judging.racing import Race
from mpitune.model.result import Scored
from mpitune.model.work import DEFAULT_CANDIDATES, MOST_CANDIDATES


def search_interval_ms(times_ms: Sequence[float], confidence: float = 0.95, ready: bool = False) -> tuple[float, float]:
    """An interval for the median of one configuration's search launches.

    It is the distribution-free order-statistic (binomial) interval. With too few launches for
    that confidence, it is [min, max]. ``ready``: the launches are finite and sorted already.
    """
    times = times_ms if ready else sorted(t for t in times_ms if math.isfinite(t))
    n = len(times)
    return (times[_rank(n, confidence) - 1], times[n - _rank(n, confidence)]) if n else (math.nan, math.nan)


@functools.lru_cache(maxsize=256)
def _rank(n: int, confidence: float) -> int:
    """The interval's j (1-based): [x_(j), x_(n+1-j)] of ``n`` launches; once per count."""
    alpha = (1.0 - confidence) / 2
    # [x_(j), x_(n+1-j)] (1-based) misses the median with probability 2 P(B <= j - 1), B ~ binom(n, 1/2):
    # take the largest j that keeps that within 1 - confidence; j = 1 is [min, max] in any case.
    j, below = 1, 0.5**n  # below: P(B <= j - 1)
    while j < (n + 1) // 2:
        nxt = below + math.comb(n, j) * 0.5**n
        if nxt > alpha:
            break
        j, below = j + 1, nxt
    return j


# Two medians whose 84 % intervals do not overlap differ at about the 5 % level (for intervals
# of similar width); 95 % intervals, from 7 launches the whole range, would make nearly every
# configuration with one slow launch a candidate.
OVERLAP_CONFIDENCE = 0.84

# A raced result whose time is within this factor of the race's bound (the first-launch bound of
# the best and the noise the results show) joins the candidates: stopped near the threshold, it
# is where a launch a little colder or noisier than the run had measured would have put the best.
# Farther out, a first launch would have had to be that much colder than any the run measured.
NEAR_BOUND = 1.05


def candidates(
    results: Sequence[Scored],
    k: int = DEFAULT_CANDIDATES,
    most: int = MOST_CANDIDATES,
    factor_sd: Mapping[int, float] | None = None,
) -> list[int]:
    """Config ids to confirm, at most `most`, best first; results not finite are ignored.

    First the k best ok results by the median of their launches (time_ms where none is finite).
    They come from the full results and the raced ones that stopped near the race's bound. A
    raced one beyond it is known slower. Then every ok result whose search_interval_ms overlaps
    the best's. The interval is widened by its rank's factor's error. ``factor_sd`` is each
    rank's factor's standard error, by rank; none means results in raw time. Then the k fastest
    raced ones (r.raced) not taken yet whose time is within ``NEAR_BOUND`` of the race's bound.
    The bound is recomputed from the results (``Race.after``): the best full median, the largest
    spread and the largest first launch / median of the full ones. It is the bound as the search
    ended. Each raced result lost against the bound of its moment, of a best no better and
    ratios no wider. Uses r.time_ms / r.times_ms / r.first_ms.
    """
    finite = {id(r): sorted(t for t in r.times_ms if math.isfinite(t)) for r in results}  # each sorted once
    medians = {i: (t[(len(t) - 1) // 2] + t[len(t) // 2]) / 2 for i, t in finite.items() if t}  # as np.median

    def median(r: Scored) -> float:  # time_ms is it, but not in data recorded elsewhere (a Kernel Tuner mean)
        return medians.get(id(r), r.time_ms)

    ok = sorted((r for r in results if r.ok and math.isfinite(r.time_ms)), key=lambda r: (median(r), r.config_id))
    full = [r for r in ok if not r.raced] or ok  # only raced results: their times are all there is
    if not full:
        return []

    z = NormalDist().inv_cdf((1 + OVERLAP_CONFIDENCE) / 2)
    sds = factor_sd or {}

    def interval(r: Scored) -> tuple[float, float]:
        lo, hi = search_interval_ms(finite[id(r)], OVERLAP_CONFIDENCE, ready=True)
        if not math.isfinite(lo):
            return (r.time_ms, r.time_ms)
        mid = median(r)
        factor = z * sds.get(r.rank, 0.0)
        below = math.hypot(math.log(mid / lo), factor)
        above = math.hypot(math.log(hi / mid), factor)
        return (mid * math.exp(-below), mid * math.exp(above))

    best_lo, best_hi = interval(full[0])
    race = dataclasses.replace(Race().after(full), best_ms=min(r.time_ms for r in full))
    near_ms = NEAR_BOUND * race.first_bound_ms
    near_set = {r.config_id for r in ok if r.raced and r.time_ms <= near_ms}
    chosen = {r.config_id for r in ([r for r in ok if not r.raced or r.config_id in near_set] or full)[:k]}
    for r in ok:  # those whose interval overlaps the best's
        lo, hi = interval(r)
        if lo <= best_hi and hi >= best_lo:
            chosen.add(r.config_id)
    near = [r.config_id for r in ok if r.raced and r.time_ms <= near_ms and r.config_id not in chosen]
    chosen.update(near[:k])  # the nearest k: many stop just beyond the bound, each costs a compile and a slot
    return list(dict.fromkeys(r.config_id for r in ok if r.config_id in chosen))[:most]  # best first, once each
