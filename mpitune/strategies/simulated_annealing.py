"""Simulated annealing with one independent chain per batch slot.

A batch of n asks n chains whose last step is told for their next step. Chains are created on
demand. So the number of chains is the batch size (the number of ranks) times the batches in
flight. The scheduler keeps two batches in flight. The chains of batch b - 1 still wait for their
results when batch b is asked. So batch b steps another n chains. Every chain starts at a point
of the space-filling design. So the first batch is spread over the space, not n steps around one
point. A step proposes a random unseen neighbour of the chain's current configuration. One
parameter changes: with probability one half to the next value up or down, else to any value.
When the result comes back, the chain moves there if it is better. Else it moves with
probability ``exp(-log(new / current) / T)``.

The temperature is adaptive: ``T = temperature * spread * cooling ** steps``. ``spread`` is
the standard deviation of the log kernel times seen so far. So the same option values work for
kernels whose configurations differ by 5 % or by 50x. ``steps`` counts the chain's steps since
it (re)started. ``T`` never drops below ``min_temperature * spread``.

A chain that has not improved on its own best for ``patience`` steps has stagnated. It restarts
with a fresh temperature. Restarts alternate between two places. One is a best configuration
found so far by all chains, to intensify there. The other is a new design point, to explore. A
chain whose neighbourhood is used up restarts the same way. A chain worse than the median of
everything seen restarts at once, and always from one of the best. The best are the best quarter
of the results, at least two, at most one per chain; after the design, its best two. With 8
chains and a few hundred evaluations, walking out of a poor region costs more steps than there
are. Failures have an infinite objective. They are never accepted; a chain only steps over them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import FAILED, Strategy, objective
from mpitune.strategies.options import Option

ADJACENT_SHARE = 0.5  # of the steps that go to the next value up or down of one parameter
OPTIONS = (
    Option("temperature", float, 0.2, "the starting temperature, relative to the spread of the log times", 1e-9, 1e9),
    Option("cooling", float, 0.9, "the factor the temperature is multiplied by per step", 1e-9, 1),
    Option("min_temperature", float, 0.001, "the lowest temperature, relative to the spread of the log times", 0, 1e9),
    Option("patience", int, 10, "steps without a better best before a chain restarts", 1, 10**6),
)


@dataclass
class Chain:
    current: int = -1  # -1 until the first configuration's result is in
    value: float = FAILED
    best: float = FAILED  # the best value this chain has seen since it (re)started
    steps: int = 0  # since the (re)start: drives the cooling
    stale: int = 0  # steps since ``best`` last improved
    pending: int = -1
    restarts: int = 0


class SimulatedAnnealing(Strategy):
    def __init__(
        self, space: SearchSpace, seed: int, temperature: float, cooling: float, min_temperature: float, patience: int
    ):
        super().__init__(space, seed)
        self.start_temperature = temperature
        self.cooling = cooling
        self.min_temperature = min_temperature
        self.patience = patience
        self.rng = np.random.default_rng(seed)
        self.chains: list[Chain] = []
        self.pending: dict[int, Chain] = {}
        self._logs: list[float] = []  # log of every finite objective told, for the spread

    def ask(self, n: int) -> list[int]:
        idle = [chain for chain in self.chains if chain.pending < 0]  # the others wait for their last step
        while len(idle) < n:
            idle.append(Chain())
            self.chains.append(idle[-1])
        batch, fresh = [], []
        for chain in idle[:n]:
            step = self._step(chain)
            if step:
                self._assign(chain, step[0])
                batch += step
            else:
                fresh.append(chain)
        starts = self.space_filling(len(fresh))  # chains that start afresh: one spread-out design
        for chain, config_id in zip(fresh, starts):
            self._assign(chain, config_id)
        batch += starts
        return batch + self.random_unseen(n - len(batch))

    def _assign(self, chain: Chain, config_id: int) -> None:
        chain.pending = config_id
        self.pending[config_id] = chain

    def _step(self, chain: Chain) -> list[int]:
        if chain.current >= 0 and (chain.stale >= self.patience or self._poor(chain)):
            self._restart(chain)
        if chain.current >= 0:
            step = self.claim(self._proposals(chain.current), 1)
            if step:
                return step
            self._restart(chain)  # neighbourhood used up
            if chain.current >= 0:
                step = self.claim(self._proposals(chain.current), 1)
                if step:
                    return step
        chain.current, chain.value = -1, FAILED  # start afresh: the caller gives it a design point
        return []

    def _poor(self, chain: Chain) -> bool:
        """Whether the chain sits in the worse half of everything seen so far."""
        if len(self._logs) < 2:
            return False
        return not math.isfinite(chain.value) or math.log(chain.value) > float(np.median(self._logs))

    def _proposals(self, config_id: int) -> np.ndarray:
        """The neighbours of ``config_id`` in the order a step tries them."""
        every = self.rng.permutation(self.space.neighbours(config_id))
        if self.rng.random() >= ADJACENT_SHARE:
            return every
        adjacent = self.space.neighbours(config_id, adjacent=True)
        return np.concatenate([self.rng.permutation(adjacent), every])

    def _restart(self, chain: Chain) -> None:
        """From one of the best configurations so far, or at random.

        Odd restarts and a chain in the worse half take one of the best. Even restarts are random."""
        chain.restarts += 1
        poor = self._poor(chain)
        chain.current, chain.value = -1, FAILED
        chain.best, chain.steps, chain.stale = FAILED, 0, 0
        if (chain.restarts % 2 or poor) and self.values:
            top = max(2, min(len(self.chains), len(self.values) // 4))  # after the design: its best few
            elite = [i for i in self.best(top) if math.isfinite(self.values[i])]
            if elite:
                chain.current = int(elite[self.rng.integers(len(elite))])
                chain.value = chain.best = self.values[chain.current]

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        super().tell(results)
        for r in results:
            value = objective(r)
            if math.isfinite(value) and value > 0:
                self._logs.append(math.log(value))
        for r in results:
            chain = self.pending.pop(r.config_id, None)
            if chain is None:
                continue
            chain.pending = -1
            value = objective(r)
            if chain.current < 0 or self._accept(chain, value):
                chain.current, chain.value = r.config_id, value
            if value < chain.best:
                chain.best, chain.stale = value, 0
            else:
                chain.stale += 1
            chain.steps += 1

    def temperature(self, chain: Chain) -> float:
        spread = float(np.std(self._logs)) if len(self._logs) > 1 else 1.0
        spread = spread or 1.0
        return spread * max(self.min_temperature, self.start_temperature * self.cooling**chain.steps)

    def _accept(self, chain: Chain, value: float) -> bool:
        if value <= chain.value:
            return True
        if not math.isfinite(value):
            return False
        if not math.isfinite(chain.value) or chain.value <= 0:
            return True
        worsening = math.log(value / chain.value)
        return bool(self.rng.random() < math.exp(-worsening / self.temperature(chain)))


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return SimulatedAnnealing(space, seed, **options)
