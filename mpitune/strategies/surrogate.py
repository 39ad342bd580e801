"""A Gaussian-process surrogate for discrete search spaces, and a model of where they fail.

Longer than 400 lines: one model, its length scales, batch, failure rate and prior mean together.

Plain numpy, for ``bayes_opt`` and ``portfolio``'s model phase: one Matern kernel (5/2 unless
the option ``smoothness`` says otherwise), one noise level (the option ``noise``), a batch built
with a constant liar. ``portfolio`` gives every parameter its own length scale (automatic
relevance determination). In a kernel space a few parameters decide most of the time and the
rest barely matter. One shared scale is too short for the idle ones: the model sees noise. Or it
is too long for the decisive ones: it sees a plateau. ``bayes_opt`` keeps one scale for all. The
scales are fitted by marginal likelihood, one parameter at a time on a small grid. So a fit
costs a few dozen Cholesky factorisations of at most a few hundred rows.

In ``portfolio`` failures do not enter the GP: a made-up time would bend the surface near them.
Instead, a kernel estimate of the failure rate around each candidate multiplies the acquisition.
It uses the same kernel and scales. So the search stops spending evaluations where
configurations fail.

``PriorUse`` is how ``portfolio`` uses times measured elsewhere (a prior, ``model/prior.py``).
It is also how it stops trusting them (docs/strategies.md, "How the default uses a prior"). A
rank test comes first. It waits for ``PRIOR_TEST_MIN`` told results of the shared design that
the prior knows. Kendall's tau between their order and the prior's must then exceed
``PRIOR_TEST_TAU``. Else the prior is dropped for good. Until then, and after a drop, the search
is exactly the one without a prior. So a prior the design contradicts costs nothing.
Once the prior passed, ``PRIOR_FIRST`` picks of its diverse best open the next model batch. The
model's mean is ``c0 + beta * p(x)``. The trust ``beta`` is refitted by generalised least
squares at every model batch. At 0 the model is the one without a prior. While the prior is
trusted, its best unseen configurations join the candidates. Everything is a function of the
prior and of what was told. So a resumed run given the same prior rebuilds the same search.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.prior import Prior
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.options import Choice, Option

try:  # optional (it comes with scikit-learn): one BLAS thread while asking
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - then BLAS uses its own default
    ThreadpoolController = None

BASE_SCALES = (0.1, 0.2, 0.4, 0.8)  # isotropic start, in unit coordinates times sqrt(n_params)
SCALE_STEPS = (0.25, 0.5, 2.0, 4.0)  # tried per parameter around its current scale
MAX_SCALE = 50.0  # a parameter with a longer scale is as good as ignored
MIN_SCALE = 0.01  # shorter makes distinct values independent all the same, and the squared distances
# of ``matern`` lose their precision (a scale of 4e-8 left K + noise not positive definite)
SWEEPS = 1  # passes over the parameters when fitting the scales
FAILURE_PRIOR = 1.0  # pseudo-observations at the overall failure rate in the failure estimate
REFIT_GROWTH = 1.25  # the length scales are refitted when the results grew by a quarter since the last fit
SEEDS_FOR_NEIGHBOURS = 5  # best results whose neighbourhoods are always candidates


NOISE = Option(
    "noise",
    float,
    1e-2,  # timings are not exactly repeatable, and snapping to a grid is rough
    "the model's noise variance on standardised log times",
    0,
    1,
    open_below=True,
)
SMOOTHNESS = Choice(
    "smoothness",
    float,
    2.5,
    "nu of the model's Matern kernel: 0.5, 1.5 or 2.5 (the smoothest)",
    0.5,
    2.5,
    allowed=(0.5, 1.5, 2.5),
)
# The options of a model's search, for ``bayes_opt`` and ``portfolio`` alike.
MODEL_OPTIONS = (
    Option(
        "candidates",
        int,
        1000,
        "unseen configurations scored per batch: the neighbours of the best five and a random sample",
        1,
        10**7,
    ),
    Option(
        "max_observations",
        int,
        250,
        "results the model learns from at most: the best half of them and a random share of the rest",
        2,
        10**5,
    ),
    Option(
        "exploration",
        float,
        0.01,
        "how far below the best (in standardised log time) expected improvement aims",
        0,
        10,
    ),
    NOISE,
    SMOOTHNESS,
)


@dataclass(frozen=True)
class Covariance:
    """A search's process: its Matern ``smoothness`` (nu) and its ``noise``, the options of those names.

    Each strategy holds its own, so two searches in one process may differ."""

    smoothness: float
    noise: float

    def __post_init__(self) -> None:  # also for a strategy built without ``strategies.create``
        SMOOTHNESS.check(self.smoothness)
        NOISE.check(self.noise)

    def correlation(self, distance: np.ndarray) -> np.ndarray:
        """The Matern correlation at ``distance``, measured in length scales."""
        if self.smoothness == 0.5:
            r = distance
            correlation: np.ndarray = np.exp(-r)
        elif self.smoothness == 1.5:
            r = math.sqrt(3) * distance
            correlation = (1 + r) * np.exp(-r)
        else:
            r = math.sqrt(5) * distance
            correlation = (1 + r + r * r / 3) * np.exp(-r)
        return correlation


def one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """Ask with one BLAS thread, when threadpoolctl is installed.

    The matrices here are small, a few hundred rows, so BLAS threads gain nothing on them. The
    other ranks of an MPI run may poll for their next batch on the same cores. That happens with
    more ranks than cores, as in a replay on a laptop. Then BLAS threads make each ask much
    slower (docs/strategies.md has the figures). The libraries are found once per process
    (``_blas``), not once per ask (docs/performance.md).
    """
    controller = _blas()
    return controller.limit(limits=1) if controller is not None else contextlib.nullcontext()


@functools.cache
def _blas() -> Any:
    """The process' thread pools (BLAS, OpenMP), found once; None without threadpoolctl."""
    return ThreadpoolController() if ThreadpoolController is not None else None


def observations(ranked: list[int], most: int, rng: np.random.Generator) -> np.ndarray:
    """What a model learns from, of the told ids ``ranked`` best first.

    That is all of them, or the best half of ``most`` plus a seeded random share of the rest.
    The cap bounds the cubic cost of a fit.
    """
    if len(ranked) <= most:
        return np.array(ranked)
    keep = most // 2
    rest = rng.choice(ranked[keep:], most - keep, replace=False)
    return np.concatenate([ranked[:keep], rest])


@dataclass(frozen=True)
class Fit:
    """A GP conditioned on observations: what scoring candidates needs."""

    x: np.ndarray  # observed points, unit coordinates
    y: np.ndarray  # their standardised log times
    scales: np.ndarray  # length scale per parameter
    chol: np.ndarray  # Cholesky factor of K + noise
    alpha: np.ndarray  # (K + noise)^-1 y
    covariance: Covariance  # the batch's rank-one updates use its noise and correlation


def matern(a: np.ndarray, b: np.ndarray, scales: np.ndarray, covariance: Covariance) -> np.ndarray:
    """Matern covariance between the rows of ``a`` and ``b``, unit variance."""
    a, b = a / scales, b / scales
    sq = (a**2).sum(1)[:, None] - 2 * a @ b.T + (b**2).sum(1)[None, :]
    return covariance.correlation(np.sqrt(np.maximum(sq, 0.0)))


def _log_likelihood(x: np.ndarray, y: np.ndarray, scales: np.ndarray, covariance: Covariance) -> float:
    """The log marginal likelihood of ``y`` at ``x`` under ``scales``, less its constant."""
    try:
        chol = np.linalg.cholesky(matern(x, x, scales, covariance) + covariance.noise * np.eye(len(x)))
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    return float(-0.5 * y @ alpha - np.log(np.diag(chol)).sum())


class LengthScales:
    """A model's length scales, refitted only when the results grew by ``REFIT_GROWTH``.

    They barely move in between, and a fit is most of what an ask costs. Per parameter
    (``portfolio``), a refit starts from the last fit. Isotropic (``bayes_opt``), it is the best
    scale of the grid.
    """

    def __init__(self, per_parameter: bool, covariance: Covariance):
        self.per_parameter = per_parameter
        self.covariance = covariance
        self.value: np.ndarray | None = None
        self.fitted_on = 0  # results told at the last fit

    def fitted(self, x: np.ndarray, y: np.ndarray, told: int) -> np.ndarray:
        """The scales for observations ``x``, ``y``, refitted if ``told`` grew enough."""
        if self.value is None or told >= REFIT_GROWTH * self.fitted_on:
            if self.per_parameter:
                self.value = fit_scales(x, y, self.covariance, self.value)
            else:
                self.value = fit_scales(x, y, self.covariance, sweeps=0)
            self.fitted_on = told
        return self.value


def fit_scales(
    x: np.ndarray, y: np.ndarray, covariance: Covariance, start: np.ndarray | None = None, sweeps: int = SWEEPS
) -> np.ndarray:
    """Per-parameter length scales of high marginal likelihood.

    The fit starts at the best isotropic scale of the grid, or at ``start`` (the last fit's). Then
    come ``sweeps`` passes of coordinate moves by ``SCALE_STEPS``.
    """
    d = x.shape[1]
    if start is None:
        grid = [np.full(d, s * math.sqrt(d)) for s in BASE_SCALES]
        likelihoods = [_log_likelihood(x, y, s, covariance) for s in grid]
        scales = grid[int(np.argmax(likelihoods))]
        best = max(likelihoods)
    else:
        scales = np.clip(start, MIN_SCALE, MAX_SCALE)
        best = _log_likelihood(x, y, scales, covariance)
    varying = [p for p in range(d) if np.ptp(x[:, p]) > 0]  # a constant parameter has no scale to learn
    for _ in range(sweeps):
        for p in varying:
            current = scales[p]
            for step in SCALE_STEPS:
                trial = scales.copy()
                trial[p] = min(max(current * step, MIN_SCALE), MAX_SCALE)
                ll = _log_likelihood(x, y, trial, covariance)
                if ll > best:
                    best = ll
                    scales = trial
    return scales


def condition(x: np.ndarray, y: np.ndarray, scales: np.ndarray, covariance: Covariance) -> Fit:
    """The GP conditioned on observations ``x``, ``y`` under ``scales``."""
    chol = np.linalg.cholesky(matern(x, x, scales, covariance) + covariance.noise * np.eye(len(x)))
    return Fit(x, y, scales, chol, np.linalg.solve(chol.T, np.linalg.solve(chol, y)), covariance)


def with_lies(x: np.ndarray, y: np.ndarray, pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The observations plus a constant lie at each point in flight (handed out, not told).

    The lie is the mean of ``y``, as the batch's own liar uses. So a batch asked while the
    previous one is out spreads away from it. It does not propose its near twins. The best and
    the mean of the observations stay what they were. Lying the model's own prediction there
    (a kriging believer) scored lower on the development caches (docs/strategies.md).
    """
    if not len(pending):
        return x, y
    return np.vstack([x, pending]), np.concatenate([y, np.full(len(pending), float(y.mean()))])


def failure_rate(
    x: np.ndarray, failed: np.ndarray, cand: np.ndarray, scales: np.ndarray, covariance: Covariance
) -> np.ndarray:
    """Kernel-weighted share of failures among the observed points near each candidate.

    Shrunk towards the overall rate: near zero far from any failure, near one in a failing region.
    """
    if not failed.any():
        return np.zeros(len(cand))
    weights = matern(cand, x, scales, covariance)
    prior = failed.mean()
    rate: np.ndarray = (weights @ failed + FAILURE_PRIOR * prior) / (weights.sum(1) + FAILURE_PRIOR)
    return rate


def choose_batch(
    fit: Fit,
    cand: np.ndarray,
    n: int,
    exploration: float,
    feasible: np.ndarray,
    local: np.ndarray | None = None,
    n_local: int = 0,
    offset: np.ndarray | None = None,
) -> list[int]:
    """Indices into ``cand`` of ``n`` points by expected improvement times the chance to be valid.

    Points are picked one at a time with a constant liar. Each chosen point is added as a fake
    observation at the mean. That is an exact rank-one update of the candidates' posterior. It
    shrinks the uncertainty around the point, so the next pick goes elsewhere. The first
    ``n_local`` picks are taken where the mask ``local`` is True, while there are any.
    ``offset`` is a mean function's value at the candidates. Then ``fit`` models what is left of
    ``fit.y`` around it: ``alpha`` from the residuals, ``fit.y``, its best and its mean as measured.
    """
    k_xc = matern(fit.x, cand, fit.scales, fit.covariance)
    whitened = np.linalg.solve(fit.chol, k_xc)
    mean = k_xc.T @ fit.alpha
    if offset is not None:
        mean = mean + offset
    var = np.maximum(1.0 - np.einsum("ij,ij->j", whitened, whitened), 1e-12)
    y_best = float(fit.y.min())
    lie = float(fit.y.mean())
    updates: list[np.ndarray] = []
    chosen = np.zeros(len(cand), dtype=bool)
    picks: list[int] = []
    for _ in range(min(n, len(cand))):
        gain = expected_improvement(mean, var, y_best - exploration) * feasible
        gain[chosen] = -np.inf
        if len(picks) < n_local and local is not None and (local & ~chosen).any():
            gain = np.where(local, gain, -np.inf)
        j = int(np.argmax(gain))
        chosen[j] = True
        picks.append(j)
        # Without BLAS (einsum, a plain loop): a threaded matrix-vector product per pick is
        # slow where MPI ranks that wait for the next batch share the cores.
        distance = np.sqrt(np.einsum("ij,ij->i", *(2 * [(cand - cand[j]) / fit.scales])))
        cov = fit.covariance.correlation(distance) - np.einsum("ij,i->j", whitened, whitened[:, j])
        for u in updates:
            cov -= u * u[j]
        u = cov / math.sqrt(var[j] + fit.covariance.noise)
        mean = mean + u * (lie - mean[j]) / math.sqrt(var[j] + fit.covariance.noise)
        var = np.maximum(var - u * u, 1e-12)
        updates.append(u)
    return picks


def expected_improvement(mean: np.ndarray, var: np.ndarray, target: float) -> np.ndarray:
    """For minimisation; the normal cdf through erf, to stay with numpy alone."""
    sd = np.sqrt(var)
    z = (target - mean) / sd
    cdf = 0.5 * (1 + _erf(z / math.sqrt(2)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    gain: np.ndarray = (target - mean) * cdf + sd * pdf
    return gain


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7."""
    sign, x = np.sign(x), np.abs(x)
    t = 1 / (1 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf: np.ndarray = sign * (1 - poly * np.exp(-x * x))
    return erf


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two equally long arrays: (concordant - discordant pairs) / all pairs.

    A tie in either counts as neither.
    """
    n = len(a)
    if n < 2:
        return 0.0
    upper = np.triu_indices(n, 1)
    signs = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
    return float(signs[upper].sum() / (n * (n - 1) / 2))


PRIOR_DIVERSITY = 2  # parameters in which each of the prior's first picks differs from every other
PRIOR_FIRST = 4  # the prior's first picks, once it passed the rank test: half a batch of 8 ranks
PRIOR_TEST_MIN = 4  # told results the prior knows before the rank test judges it
PRIOR_TEST_TAU = 0.0  # Kendall's tau above which the prior is used
# The trust in a prior before any measurement, in standardised log time per unit of p.
PRIOR_BETA = 0.5
PRIOR_BETA_SD = 0.5  # how far measurements may move it before they are many
PRIOR_INTERCEPT_SD = 10.0  # the mean's constant: left to the measurements
PRIOR_CANDIDATES = 200  # the prior's best unseen configurations added to the model's candidates


class PriorUse:
    """A prior on one space, standardised per source, and the trust the measurements give it."""

    def __init__(self, space: SearchSpace, prior: Prior, covariance: Covariance):
        self.space = space
        self.covariance = covariance  # the search's: the mean is fitted under the process that uses it
        columns = []
        for time_ms in prior.time_ms:
            logs = np.log(np.where(np.isfinite(time_ms) & (time_ms > 0), time_ms, np.nan))
            known = np.isfinite(logs)
            z = np.full(len(space), np.nan)
            if known.sum() >= 2:  # fewer times than two give no order: the source stays unused
                z[known] = (logs[known] - logs[known].mean()) / (logs[known].std() or 1.0)
            columns.append(z)
        # (configurations, sources), NaN where a source has no time
        self.z = np.array(columns, dtype=np.float64).reshape(len(columns), len(space)).T
        known = np.isfinite(self.z)
        # One time over the sources: the mean of the standardised times a configuration has (NaN
        # where none has one), and the prior's order by it.
        mean = np.where(known, self.z, 0.0).sum(1) / np.maximum(known.sum(1), 1)
        self.mean_z = np.where(known.any(1), mean, np.nan)
        self.order = np.argsort(np.nan_to_num(self.mean_z, nan=np.inf), kind="stable")[: int(known.any(1).sum())]
        self.beta = np.full(self.z.shape[1], PRIOR_BETA)  # per source, refitted at each model batch
        self.intercept = 0.0
        # The rank test's verdict: None until PRIOR_TEST_MIN results it knows are told, then
        # whether their order agrees with the prior's (True) or not (False, for good).
        self.agreed: bool | None = None
        self.tau = math.nan  # the rank correlation it was judged on

    @property
    def trusted(self) -> bool:
        """Whether the prior passed the rank test and some source keeps a positive trust."""
        return self.agreed is True and bool((self.beta > 0).any())

    def judge(self, values: dict[int, float]) -> bool | None:
        """Once: whether the order of the told results agrees with the prior's.

        ``values`` are the told results: lower is better, and failures are not finite. The test
        is Kendall's tau between the prior's mean standardised time and the measured value. It
        runs over the results the prior knows. It is made at the first call with at least
        ``PRIOR_TEST_MIN`` of them. None until then.
        """
        if self.agreed is None:
            ids = np.array([i for i, v in values.items() if math.isfinite(v)], dtype=np.int64)
            known = ids[np.isfinite(self.mean_z[ids])]
            if len(known) >= PRIOR_TEST_MIN:
                self.tau = kendall_tau(self.mean_z[known], np.array([values[int(i)] for i in known]))
                self.agreed = self.tau > PRIOR_TEST_TAU
        return self.agreed

    def features(self, ids: np.ndarray) -> np.ndarray:
        """The standardised prior times of ``ids``, 0 (the space's average) where unknown."""
        known: np.ndarray = np.nan_to_num(self.z[np.asarray(ids, dtype=np.int64)], nan=0.0)
        return known

    def diverse_best(self, seen: set[int], n: int) -> list[int]:
        """Up to ``n`` unseen ids down the prior's order, each unlike every one taken before.

        Each differs in at least ``PRIOR_DIVERSITY`` parameters, fewer when the space has fewer.
        """
        need = min(PRIOR_DIVERSITY, len(self.space.names))
        indices = self.space.indices
        taken: list[int] = []
        for i in self.order.tolist():
            if len(taken) == n:
                break
            if i in seen:
                continue
            if all(int((indices[i] != indices[j]).sum()) >= need for j in taken):
                taken.append(i)
        return taken

    def best_unseen(self, unseen: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` unseen ids the prior ranks best."""
        best: np.ndarray = self.order[unseen[self.order]][:k]
        return best

    def refit(self, x: np.ndarray, y: np.ndarray, p: np.ndarray, scales: np.ndarray) -> np.ndarray:
        """The prior's mean at the observations ``x``: ``c0 + beta . p``.

        ``y`` holds standardised log times, ``p`` prior features. The fit is generalised least
        squares under the process's covariance, with Gaussian priors on the coefficients.
        ``beta`` is clipped at 0 per source. So a prior whose order disagrees is ignored, not
        reversed. Zero when no source is trusted.
        """
        design = np.column_stack([np.ones(len(y)), p])
        precision = np.diag([PRIOR_INTERCEPT_SD**-2] + [PRIOR_BETA_SD**-2] * p.shape[1])
        centre = np.concatenate([[0.0], np.full(p.shape[1], PRIOR_BETA)])
        chol = np.linalg.cholesky(matern(x, x, scales, self.covariance) + self.covariance.noise * np.eye(len(x)))
        white_design = np.linalg.solve(chol, design)
        white_y = np.linalg.solve(chol, y)
        coef = np.linalg.solve(white_design.T @ white_design + precision, white_design.T @ white_y + precision @ centre)
        self.intercept = float(coef[0])
        self.beta = np.maximum(coef[1:], 0.0)
        return self.mean(p)

    def mean(self, p: np.ndarray) -> np.ndarray:
        """The prior's mean at points of prior features ``p``, as last refitted."""
        if not self.trusted:
            return np.zeros(len(p))
        shifted: np.ndarray = self.intercept + p @ self.beta
        return shifted
