"""Every valid configuration, in id order; batches are consecutive runs of ids."""

from __future__ import annotations

from mpitune.strategies.base import Strategy


class BruteForce(Strategy):
    def __init__(self, space, seed: int):
        super().__init__(space, seed)
        self._next = 0

    def ask(self, n: int) -> list[int]:
        batch, self._next = self._scan(n)
        self.seen.update(batch)
        return batch

    def upcoming(self, n: int) -> list[int]:
        return self._scan(n)[0]

    def _scan(self, n: int) -> tuple[list[int], int]:
        """The next ``n`` unseen ids and where the scan stopped."""
        batch, i = [], self._next
        while len(batch) < n and i < len(self.space):
            if i not in self.seen:
                batch.append(i)
            i += 1
        return batch, i


def create(space, seed: int) -> Strategy:
    return BruteForce(space, seed)
