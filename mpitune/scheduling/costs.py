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
        varying = [j for j, size in enumerate(space.sizes) if size > 1]
        # Value indices 1.. of each varying parameter; value 0 is the intercept's share.
        self._singles = [(j, v) for j in varying for v in range(1, int(space.sizes[j]))]
        self._pairs: list[tuple[int, int, int, int]] = []
        for a, b in itertools.combinations(varying, 2):
            block = [(a, va, b, vb) for va in range(1, int(space.sizes[a])) for vb in range(1, int(space.sizes[b]))]
            if 1 + len(self._singles) + len(self._pairs) + len(block) > MAX_FEATURES:
                break
            self._pairs.extend(block)
        width = 1 + len(self._singles) + len(self._pairs)
        self._gram = np.zeros((width, width))
        self._moment = np.zeros(width)
        self._weights: np.ndarray | None = None
        self.learned = 0  # results learned from

    @property
    def features(self) -> int:
        return len(self._moment)

    def _features(self, ids: Sequence[int]) -> np.ndarray:
        rows = self.space.indices[np.asarray(ids, dtype=np.int64)]
        out = np.zeros((len(rows), self.features))
        out[:, 0] = 1.0
        for k, (j, v) in enumerate(self._singles, start=1):
            out[:, k] = rows[:, j] == v
        start = 1 + len(self._singles)
        for k, (a, va, b, vb) in enumerate(self._pairs, start=start):
            out[:, k] = (rows[:, a] == va) & (rows[:, b] == vb)
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
