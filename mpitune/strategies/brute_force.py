"""Every valid configuration, in id order; batches are consecutive runs of ids."""

from __future__ import annotations

from .base import Strategy


class BruteForce(Strategy):
    def __init__(self, space, seed: int):
        super().__init__(space, seed)
        self._next = 0

    def ask(self, n: int) -> list[int]:
        batch = []
        while len(batch) < n and self._next < len(self.space):
            if self._next not in self.seen:
                batch.append(self._next)
            self._next += 1
        self.seen.update(batch)
        return batch


def create(space, seed: int) -> Strategy:
    return BruteForce(space, seed)
