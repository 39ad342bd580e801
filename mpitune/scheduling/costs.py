"""What a configuration will cost a rank, predicted from the configurations measured so far.

Rank 0 deals a batch so that every rank's chunk takes about as long (batching.deal_by_cost):
the whole batch waits for its slowest rank, and measured durations of neighbouring
configurations differ by up to ten times. The cost of a configuration is the seconds its rank
spends on it: compile + verify + benchmark (a failed compile costs only its compile).

The model is a ridge regression of log seconds on the parameter values, one indicator per
value of every parameter that varies, and one per pair of values of two parameters (as many
pairs as ``MAX_FEATURES`` allows, in parameter order): costs are products of factors (work
per thread, threads per block, vector width), so logs add, and the pairs catch what two
parameters do together (a tile size and the block it is spread over). Its sufficient
statistics (FᵀF and Fᵀy) are summed as results come, so learning costs the same whatever was
measured before, and the weights are solved once per batch. No MPI, no clock, no randomness:
the same results give the same predictions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace

MAX_FEATURES = 512  # indicators in all: FᵀF is MAX_FEATURES² doubles (2 MiB), solved per batch
RIDGE = 1.0  # shrinks the weight of a value seen in few configurations towards none
FLOOR_S = 1e-3  # a configuration answered without running (invalid) costs about nothing


def result_cost_s(result: Result) -> float:
    """What measuring ``result`` cost its rank: compile + verify + benchmark seconds."""
    return result.compile_s + result.verify_s + result.benchmark_s


class CostModel:
    """Predicted seconds per configuration of one search space, learned from its results."""

    def __init__(self, space: SearchSpace):
        self.space = space
        sizes = [int(size) for size in space.sizes]
        varying = [j for j, size in enumerate(sizes) if size > 1]
        # A configuration has one indicator set per varying parameter whose value is not its
        # first (value 0 is the intercept's share), and one per pair of such parameters: each
        # parameter and each pair owns a block of indicators, numbered from its offset.
        width = 1
        self._singles: list[tuple[int, int]] = []  # (parameter, offset)
        for j in varying:
            self._singles.append((j, width))
            width += sizes[j] - 1
        self._pairs: list[tuple[int, int, int]] = []  # (parameter a, parameter b, offset)
        for a, b in itertools.combinations(varying, 2):
            block = (sizes[a] - 1) * (sizes[b] - 1)
            if width + block > MAX_FEATURES:
                break
            self._pairs.append((a, b, width))
            width += block
        self._gram = np.zeros((width, width))
        self._moment = np.zeros(width)
        self._weights: np.ndarray | None = None
        self.learned = 0  # results learned from

    @property
    def features(self) -> int:
        return len(self._moment)

    def _features(self, ids: Sequence[int]) -> np.ndarray:
        """The indicators of each id, one row each: a few numpy operations per parameter and
        pair, not per indicator, since rank 0 pays for them with every batch."""
        rows = self.space.indices[np.asarray(ids, dtype=np.int64)].astype(np.int64)
        out = np.zeros((len(rows), self.features))
        out[:, 0] = 1.0
        at = np.arange(len(rows))
        sizes = self.space.sizes
        for j, offset in self._singles:
            set_ = rows[:, j] > 0
            out[at[set_], offset + rows[set_, j] - 1] = 1.0
        for a, b, offset in self._pairs:
            set_ = (rows[:, a] > 0) & (rows[:, b] > 0)
            out[at[set_], offset + (rows[set_, a] - 1) * (int(sizes[b]) - 1) + rows[set_, b] - 1] = 1.0
        return out

    def learn(self, results: Iterable[Result]) -> None:
        """Add measured results (a failed one too: it tells what failing costs)."""
        results = list(results)
        if not results:
            return
        f = self._features([r.config_id for r in results])
        y = np.log(np.maximum([result_cost_s(r) for r in results], FLOOR_S))
        self._gram += f.T @ f
        self._moment += f.T @ y
        self._weights = None
        self.learned += len(results)

    def predict_s(self, ids: Sequence[int]) -> np.ndarray | None:
        """Predicted seconds of each id; None before any result was learned (nothing to go by)."""
        if not self.learned:
            return None
        if self._weights is None:
            self._weights = np.linalg.solve(self._gram + RIDGE * np.eye(self.features), self._moment)
        return np.exp(self._features(ids) @ self._weights)
