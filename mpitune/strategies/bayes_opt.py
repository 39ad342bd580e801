"""Batch Bayesian optimisation: a Gaussian process in plain numpy, expected improvement, and
a constant liar to fill a batch.

The first batch is the space-filling design, until one batch (at least eight results) or
``initial_samples`` results are in, whichever is fewer. Then, per batch, a GP with a
Matern-5/2 kernel on unit coordinates is fitted to the log kernel times (standardised; the
length scale is picked from a small grid by marginal likelihood, and refitted only when the
results grew by a quarter since the last fit, as it barely moves in between). Failures are penalised:
they enter the GP at the worst value seen, so the surrogate learns where not to go. The
acquisition is scored on at most ``candidates`` unseen configurations: the unseen neighbours
of the best few results plus a random sample of the rest, which keeps asking to about 2 ms
per configuration on spaces of 20,000 (AMD EPYC, 1 core). The batch is built one point at a
time with the constant liar: after choosing the point of highest expected improvement, the GP is
conditioned on a fake observation there (the mean of the observed values), which lowers the
uncertainty around it, so the next point goes elsewhere. The conditioning is a rank-one update
of the candidates' posterior, exact for a GP, so a batch of n costs one fit and n updates.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import surrogate
from mpitune.strategies.base import Strategy, integer_option, number_option
from mpitune.strategies.surrogate import expected_improvement

try:  # optional (it comes with scikit-learn): one BLAS thread while asking
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - then BLAS uses its own default
    threadpool_limits = None

LENGTH_SCALES = (0.1, 0.2, 0.4, 0.8)  # in unit coordinates, scaled by sqrt(n_params)
NOISE = 1e-2  # measured times are not exactly repeatable, and snapping to a grid is rough
SEEDS_FOR_NEIGHBOURS = 5  # best results whose neighbourhoods are always candidates
REFIT_GROWTH = 1.25  # the length scale is refitted when the results grew by a quarter since the last fit


def _one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """The matrices here are small (a few hundred rows): BLAS threads gain nothing on them,
    and while the other ranks of an MPI run poll for their next batch on the same cores
    (more ranks than cores, as in a replay on a laptop), they make each ask up to ten times
    slower. So asking uses one BLAS thread when threadpoolctl is installed."""
    return threadpool_limits(1) if threadpool_limits is not None else contextlib.nullcontext()


class BayesOpt(Strategy):
    def __init__(
        self,
        space: SearchSpace,
        seed: int,
        initial_samples: int,
        candidates: int,
        max_observations: int,
        exploration: float,
    ):
        super().__init__(space, seed)
        self.initial_samples = initial_samples
        self.candidates = candidates
        self.max_observations = max_observations
        self.exploration = exploration
        self.rng = np.random.default_rng(seed)
        self._scale = 0.0  # the fitted length scale, refitted when the data grew by REFIT_GROWTH
        self._scale_fitted_on = 0

    def ask(self, n: int) -> list[int]:
        if not self.design_done(self.initial_samples, n):
            return self.space_filling(n)
        with _one_blas_thread():
            return self._ask(n)

    def _ask(self, n: int) -> list[int]:
        observed = self._observations()
        cand = self._candidates()
        if not len(cand):
            return []
        unit = self.space.unit_coordinates
        x, y = unit(observed), self._targets(observed)
        if not self._scale or len(self.values) >= REFIT_GROWTH * self._scale_fitted_on:
            self._scale, self._scale_fitted_on = self._fit_scale(x, y), len(self.values)
        scale = self._scale
        lie, best = float(np.mean(y)), float(np.min(y))
        x, y = surrogate.with_lies(x, y, unit(self.in_flight()))
        k_xx = _matern(x, x, scale) + NOISE * np.eye(len(x))
        chol = np.linalg.cholesky(k_xx)
        cand_x = unit(cand)
        whitened = np.linalg.solve(chol, _matern(x, cand_x, scale))  # L^-1 k(x, c)
        mean = whitened.T @ np.linalg.solve(chol, y)
        var = np.maximum(1.0 - np.einsum("ij,ij->j", whitened, whitened), 1e-12)
        updates: list[np.ndarray] = []  # posterior covariance of candidates with each lie
        chosen = np.zeros(len(cand), dtype=bool)
        batch: list[int] = []
        for _ in range(min(n, len(cand))):
            gain = expected_improvement(mean, var, best - self.exploration)
            gain[chosen] = -np.inf
            j = int(np.argmax(gain))
            chosen[j] = True
            batch.append(int(cand[j]))
            cov = _matern(cand_x, cand_x[j][None, :], scale)[:, 0] - whitened.T @ whitened[:, j]
            for u in updates:
                cov -= u * u[j]
            u = cov / math.sqrt(var[j] + NOISE)
            mean = mean + u * (lie - mean[j]) / math.sqrt(var[j] + NOISE)
            var = np.maximum(var - u * u, 1e-12)
            updates.append(u)
        return self.mark_seen(batch) + self.random_unseen(n - len(batch))

    def _observations(self) -> np.ndarray:
        """The configurations the GP learns from: all, or the best half of the budget plus a
        seeded random share of the rest, to bound the cubic cost of a fit."""
        ranked = self.best(len(self.values))
        if len(ranked) <= self.max_observations:
            return np.array(ranked)
        keep = self.max_observations // 2
        rest = self.rng.choice(ranked[keep:], self.max_observations - keep, replace=False)
        return np.concatenate([ranked[:keep], rest])

    def _targets(self, observed: np.ndarray) -> np.ndarray:
        values = np.array([self.values[i] for i in observed])
        finite = np.isfinite(values)
        logs = np.log(np.where(finite, np.maximum(values, 1e-12), 1.0))
        worst = logs[finite].max() if finite.any() else 0.0
        logs = np.where(finite, logs, worst)  # failures: as bad as the worst success
        return (logs - logs.mean()) / (logs.std() or 1.0)

    def _candidates(self) -> np.ndarray:
        neighbourhoods = [self.space.neighbours(i) for i in self.best(SEEDS_FOR_NEIGHBOURS)]
        unseen = ~self.seen_mask()
        near = np.unique(np.concatenate(neighbourhoods)) if neighbourhoods else np.empty(0, dtype=np.int64)
        near = near[unseen[near]]
        unseen[near] = False
        rest = np.flatnonzero(unseen)
        take = max(0, self.candidates - len(near))
        if len(rest) > take:
            rest = np.sort(self.rng.choice(rest, take, replace=False))
        return np.concatenate([near, rest]).astype(np.int64)

    def _fit_scale(self, x: np.ndarray, y: np.ndarray) -> float:
        """The length scale of highest log marginal likelihood on the grid."""
        best_scale, best_ll = 0.0, -np.inf
        for base in LENGTH_SCALES:
            scale = base * math.sqrt(x.shape[1])
            chol = np.linalg.cholesky(_matern(x, x, scale) + NOISE * np.eye(len(x)))
            alpha = _chol_solve(chol, y)
            ll = -0.5 * y @ alpha - np.log(np.diag(chol)).sum()
            if ll > best_ll:
                best_scale, best_ll = scale, ll
        return best_scale


def _matern(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    sq = (a**2).sum(1)[:, None] - 2 * a @ b.T + (b**2).sum(1)[None, :]
    r = math.sqrt(5) * np.sqrt(np.maximum(sq, 0.0)) / scale
    return (1 + r + r * r / 3) * np.exp(-r)


def _chol_solve(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.solve(chol.T, np.linalg.solve(chol, b))


def create(
    space: SearchSpace,
    seed: int,
    initial_samples: int = 20,
    candidates: int = 1000,
    max_observations: int = 250,
    exploration: float = 0.01,
) -> Strategy:
    return BayesOpt(
        space,
        seed,
        integer_option("initial_samples", initial_samples, 1, 10**6),
        integer_option("candidates", candidates, 1, 10**7),
        integer_option("max_observations", max_observations, 2, 10**5),
        number_option("exploration", exploration, 0, 10),
    )
