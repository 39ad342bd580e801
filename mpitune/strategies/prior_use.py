"""How the default search uses times measured elsewhere (a prior, ``model/prior.py``), and how it
stops trusting them.

Three uses, each dropped as the new device disagrees:

- **The first batch** is the prior's best under a diversity rule: down the prior's order, a
  configuration is taken only if it differs from every one taken in at least ``DIVERSITY``
  parameters. Its top few are usually near twins, and across vendors the order changes a lot,
  so the batch spreads over several good regions instead of betting on one.
- **The surrogate's mean** is ``c0 + beta * p(x)``, with ``p`` the prior's standardised log
  time (0, the space's average, where the prior has none, so unmatched configurations stay
  reachable on the model's own terms), and the Gaussian process models what is left. ``beta`` is
  the trust: fitted to the measurements so far by generalised least squares under the same
  covariance as the process, with a Gaussian prior around ``BETA_PRIOR`` that the first few
  results cannot overturn and many can. Where the new device's order disagrees, ``beta`` falls;
  at 0 or below the prior is ignored and the model is exactly the one without a prior.
- **Candidates**: while the prior is trusted, its best unseen configurations join the ones the
  model scores, so the model can pick what the prior ranks high far from anything measured.

Everything here is a function of the prior and of what was told: a resumed run given the same
prior rebuilds the same search.
"""

from __future__ import annotations

import numpy as np

from mpitune.model.prior import Prior
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import surrogate

DIVERSITY = 2  # parameters in which each pick of the first batch differs from every other
FIRST = 8  # picks of the prior's diverse best before the shared design: one batch of 8 ranks
BETA_PRIOR = 0.5  # the trust in a prior before any measurement, in standardised log time per unit of p
BETA_SD = 0.5  # how far measurements may move it before they are many
INTERCEPT_SD = 10.0  # the mean's constant: left to the measurements
CANDIDATES = 200  # the prior's best unseen configurations added to the model's candidates


class PriorUse:
    """A prior on one space, standardised per source, and the trust the measurements give it."""

    def __init__(self, space: SearchSpace, prior: Prior):
        self.space = space
        columns = []
        for time_ms in prior.time_ms:
            logs = np.log(np.where(np.isfinite(time_ms) & (time_ms > 0), time_ms, np.nan))
            known = np.isfinite(logs)
            z = np.full(len(space), np.nan)
            if known.sum() >= 2:
                z[known] = (logs[known] - logs[known].mean()) / (logs[known].std() or 1.0)
            columns.append(z)
        # (configurations, sources), NaN where a source has no time
        self.z = np.array(columns, dtype=np.float64).reshape(len(columns), len(space)).T
        known = np.isfinite(self.z)
        # One order over the sources: the mean of the standardised times a configuration has.
        mean = np.where(known, self.z, 0.0).sum(1) / np.maximum(known.sum(1), 1)
        self.order = np.argsort(np.where(known.any(1), mean, np.inf), kind="stable")[: int(known.any(1).sum())]
        self.beta = np.full(self.z.shape[1], BETA_PRIOR)  # per source, refitted at each model batch
        self.intercept = 0.0

    @property
    def trusted(self) -> bool:
        return bool((self.beta > 0).any())

    def features(self, ids: np.ndarray) -> np.ndarray:
        """The standardised prior times of ``ids``, 0 (the space's average) where unknown."""
        known: np.ndarray = np.nan_to_num(self.z[np.asarray(ids, dtype=np.int64)], nan=0.0)
        return known

    def diverse_best(self, seen: set[int], n: int) -> list[int]:
        """Up to ``n`` unseen ids down the prior's order, each differing from every one taken in
        at least ``DIVERSITY`` parameters (fewer when the space has fewer)."""
        need = min(DIVERSITY, len(self.space.names))
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
        """The prior's mean at the observations ``x`` (standardised log times ``y``, prior
        features ``p``): ``c0 + beta . p`` by generalised least squares under the process's
        covariance, with Gaussian priors on the coefficients; ``beta`` clipped at 0 per source (a
        prior whose order disagrees is ignored, not reversed). Zero when no source is trusted."""
        design = np.column_stack([np.ones(len(y)), p])
        precision = np.diag([INTERCEPT_SD**-2] + [BETA_SD**-2] * p.shape[1])
        centre = np.concatenate([[0.0], np.full(p.shape[1], BETA_PRIOR)])
        chol = np.linalg.cholesky(surrogate.matern(x, x, scales) + surrogate.NOISE * np.eye(len(x)))
        white_design = np.linalg.solve(chol, design)
        white_y = np.linalg.solve(chol, y)
        coef = np.linalg.solve(white_design.T @ white_design + precision, white_design.T @ white_y + precision @ centre)
        self.intercept, self.beta = float(coef[0]), np.maximum(coef[1:], 0.0)
        return self.mean(p)

    def mean(self, p: np.ndarray) -> np.ndarray:
        """The prior's mean at points of prior features ``p``, as last refitted."""
        if not self.trusted:
            return np.zeros(len(p))
        shifted: np.ndarray = self.intercept + p @ self.beta
        return shifted
