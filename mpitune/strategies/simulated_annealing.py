"""Simulated annealing with one independent chain per batch slot.

A batch of n asks each of the first n chains for its next step (chains are created on
demand, so the number of chains follows the batch size, i.e. the number of ranks). A step
proposes a random unseen neighbour (one parameter changed) of the chain's current
configuration; when it comes back, the chain moves there if it is better, or with
probability ``exp(-relative_worsening / T)``. Each step cools the chain's temperature by
``cooling`` down to ``min_temperature``. A chain whose neighbourhood is used up (other
chains and earlier steps saw it all) restarts at a random unseen configuration. Failures
have an infinite objective: they are never accepted, a chain only steps over them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..result import Result
from .base import FAILED, Strategy, check, objective


@dataclass
class Chain:
    current: int = -1  # -1 until the first configuration's result is in
    value: float = FAILED
    temperature: float = 1.0
    pending: int = -1


class SimulatedAnnealing(Strategy):
    def __init__(self, space, seed: int, temperature: float, cooling: float, min_temperature: float):
        super().__init__(space, seed)
        self.start_temperature = temperature
        self.cooling = cooling
        self.min_temperature = min_temperature
        self.rng = np.random.default_rng(seed)
        self.chains: list[Chain] = []
        self.pending: dict[int, Chain] = {}

    def ask(self, n: int) -> list[int]:
        while len(self.chains) < n:
            self.chains.append(Chain(temperature=self.start_temperature))
        batch = []
        for chain in self.chains[:n]:
            if chain.pending >= 0:
                continue  # still waiting for its last step
            step = self._step(chain)
            if step:
                chain.pending = step[0]
                self.pending[step[0]] = chain
                batch += step
        return batch + self.random_unseen(n - len(batch))

    def _step(self, chain: Chain) -> list[int]:
        if chain.current >= 0:
            neighbours = self.space.neighbours(chain.current)
            step = self.claim(self.rng.permutation(neighbours), 1)
            if step:
                return step
        chain.current, chain.value = -1, FAILED  # start, or restart from a used-up neighbourhood
        return self.random_unseen(1)

    def tell(self, results: Iterable[Result]) -> None:
        results = list(results)
        super().tell(results)
        for r in results:
            chain = self.pending.pop(r.config_id, None)
            if chain is None:
                continue
            chain.pending = -1
            value = objective(r)
            if chain.current < 0 or self._accept(chain, value):
                chain.current, chain.value = r.config_id, value
            chain.temperature = max(self.min_temperature, chain.temperature * self.cooling)

    def _accept(self, chain: Chain, value: float) -> bool:
        if value <= chain.value:
            return True
        if not math.isfinite(value):
            return False
        worsening = (value - chain.value) / abs(chain.value) if chain.value else math.inf
        return bool(self.rng.random() < math.exp(-worsening / chain.temperature))


def create(space, seed: int, temperature: float = 1.0, cooling: float = 0.95,
           min_temperature: float = 0.001) -> Strategy:
    return SimulatedAnnealing(space, seed, check("temperature", temperature, 1e-9, 1e9),
                              check("cooling", cooling, 1e-9, 1), check("min_temperature", min_temperature, 0, 1e9))
