"""Batch Bayesian optimisation: a Gaussian process in plain numpy, expected improvement, and
a constant liar to fill a batch.

The first batch is the space-filling design. It lasts until one batch (at least eight results)
or ``initial_samples`` results are in, whichever is fewer. Then, per batch, a GP is fitted to
the standardised log kernel times. The GP (``surrogate``) has a Matern kernel (5/2 unless
``smoothness`` says otherwise) on unit coordinates, one length scale for every parameter. The
length scale is picked from a small grid by marginal likelihood. It is refitted only when the
results grew by a quarter since the last fit, as it barely moves in between. Failures enter the
GP at the worst value seen. So the surrogate learns where not to go.

The acquisition is scored on at most ``candidates`` unseen configurations. They are the unseen
neighbours of the best few results plus a random sample of the rest. This keeps asking cheap
(the cost is in docs/strategies.md). The batch is built one point at a time with the constant
liar. After choosing the point of highest expected improvement, the GP is conditioned on a fake
observation there: the mean of the observed values. That lowers the uncertainty around it, so
the next point goes elsewhere. The conditioning is a rank-one update of the candidates'
posterior, exact for a GP. So a batch of n costs one fit and n updates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import geometry, surrogate
from mpitune.strategies.base import Strategy
from mpitune.strategies.options import Option

OPTIONS = (
    Option(
        "initial_samples",
        int,
        20,
        "results of the space-filling design before the model takes over (one batch, at least 8, when fewer)",
        1,
        10**6,
    ),
    *surrogate.MODEL_OPTIONS,
)


class BayesOpt(Strategy):
    def __init__(
        self,
        space: SearchSpace,
        seed: int,
        initial_samples: int,
        candidates: int,
        max_observations: int,
        exploration: float,
        noise: float,
        smoothness: float,
    ):
        super().__init__(space, seed)
        self.covariance = surrogate.Covariance(smoothness, noise)
        self.initial_samples = initial_samples
        self.candidates = candidates
        self.max_observations = max_observations
        self.exploration = exploration
        self.rng = np.random.default_rng(seed)
        self.scales = surrogate.LengthScales(per_parameter=False, covariance=self.covariance)

    def ask(self, n: int) -> list[int]:
        if not self.design_done(self.initial_samples, n):
            return self.space_filling(n)
        with surrogate.one_blas_thread():
            return self._ask(n)

    def _ask(self, n: int) -> list[int]:
        observed = surrogate.observations(self.best(len(self.values)), self.max_observations, self.rng)
        around = self.best(surrogate.SEEDS_FOR_NEIGHBOURS)
        cand = geometry.acquisition_candidates(self.space, ~self.seen_mask(), around, self.candidates, self.rng)
        if not len(cand):
            return []
        unit = self.space.unit_coordinates
        x, y = unit(observed), self._targets(observed)
        scales = self.scales.fitted(x, y, len(self.values))
        fit = surrogate.condition(*surrogate.with_lies(x, y, unit(self.in_flight())), scales, self.covariance)
        picks = surrogate.choose_batch(fit, unit(cand), n, self.exploration, np.ones(len(cand)))
        return self.mark_seen([int(cand[j]) for j in picks]) + self.random_unseen(n - len(picks))

    def _targets(self, observed: np.ndarray) -> np.ndarray:
        values = np.array([self.values[i] for i in observed])
        finite = np.isfinite(values)
        logs = np.log(np.where(finite, np.maximum(values, 1e-12), 1.0))
        worst = logs[finite].max() if finite.any() else 0.0
        logs = np.where(finite, logs, worst)  # failures: as bad as the worst success
        standardised: np.ndarray = (logs - logs.mean()) / (logs.std() or 1.0)
        return standardised


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return BayesOpt(space, seed, **options)
