"""Every valid configuration, in id order; batches are consecutive runs of ids."""

from __future__ import annotations

from typing import Any

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import geometry
from mpitune.strategies.base import Strategy
from mpitune.strategies.options import Option

OPTIONS: tuple[Option, ...] = ()


class BruteForce(Strategy):
    def __init__(self, space: SearchSpace, seed: int):
        super().__init__(space, seed)
        self._next = 0

    def ask(self, n: int) -> list[int]:
        batch, self._next = geometry.scan(range(len(self.space)), self._next, self.seen, n)
        return self.mark_seen(batch)

    def upcoming(self, n: int) -> list[int]:
        return geometry.scan(range(len(self.space)), self._next, self.seen, n)[0]


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return BruteForce(space, seed, **options)
