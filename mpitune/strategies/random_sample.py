"""Uniform sampling without replacement: a seeded permutation of the ids, cut into batches.

``fraction`` (0 < f <= 1) stops after that share of the space, as in Kernel Tuner.
"""

from __future__ import annotations

import numpy as np

from mpitune.strategies.base import Strategy


class RandomSample(Strategy):
    def __init__(self, space, seed: int, fraction: float = 1.0):
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        super().__init__(space, seed)
        order = np.random.default_rng(seed).permutation(len(space))
        self._order = order[: max(1, int(round(fraction * len(space))))]
        self._pos = 0

    def ask(self, n: int) -> list[int]:
        batch, self._pos = self._scan(n)
        self.seen.update(batch)
        return batch

    def upcoming(self, n: int) -> list[int]:
        return self._scan(n)[0]

    def _scan(self, n: int) -> tuple[list[int], int]:
        """The next ``n`` unseen ids of the permutation and where the scan stopped."""
        batch, i = [], self._pos
        while len(batch) < n and i < len(self._order):
            config_id = int(self._order[i])
            i += 1
            if config_id not in self.seen:
                batch.append(config_id)
        return batch, i


def create(space, seed: int, fraction: float = 1.0) -> Strategy:
    return RandomSample(space, seed, fraction)
