"""Particle swarm optimisation in unit coordinates, one particle move per batch slot.

The swarm has ``swarm_size`` particles. Each batch slot moves the next particle in turn
(round robin). So batches smaller or larger than the swarm both work. A particle starts at a
point of the space-filling design. A move is ``v = w v + c1 r1 (personal best - x) + c2 r2 (global best - x)``.
The new point is snapped to the nearest unseen configuration: the particle's new position.
The global best is the best configuration told so far. It includes results the swarm did not
propose (a resumed cache). Failures have an infinite objective, so they are never a best.

A swarm converges onto its global best and then only snaps to unseen configurations around
it. So a particle restarts when its personal best has not improved for ``patience`` moves. It
starts again at a new design point, with no velocity and no memory. The swarm keeps its global
best. So the restarted particle is still pulled towards it, but from somewhere new.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import FAILED, Strategy, objective
from mpitune.strategies.options import Option

OPTIONS = (
    Option("swarm_size", int, 20, "particles in the swarm", 1, 10**6),
    Option("inertia", float, 0.5, "w, the share of its velocity a particle keeps", 0, 2),
    Option("cognitive", float, 2.0, "c1, the pull towards the particle's own best", 0, 10),
    Option("social", float, 1.0, "c2, the pull towards the best of the swarm", 0, 10),
    Option("patience", int, 5, "moves without a better personal best before a particle restarts", 1, 10**6),
)


class ParticleSwarm(Strategy):
    def __init__(
        self,
        space: SearchSpace,
        seed: int,
        swarm_size: int,
        inertia: float,
        cognitive: float,
        social: float,
        patience: int,
    ):
        super().__init__(space, seed)
        self.patience = patience
        self.inertia, self.cognitive, self.social = inertia, cognitive, social
        self.rng = np.random.default_rng(seed)
        d = len(space.names)
        self.position = np.zeros((swarm_size, d))
        self.velocity = np.zeros((swarm_size, d))
        self.personal = np.zeros((swarm_size, d))
        self.personal_value = np.full(swarm_size, FAILED)
        self.started = np.zeros(swarm_size, dtype=bool)
        self.stale = np.zeros(swarm_size, dtype=np.int64)  # moves since the personal best improved
        self.pending: dict[int, int] = {}  # config id -> particle
        self._turn = 0

    def ask(self, n: int) -> list[int]:
        size = len(self.position)
        particles = [(self._turn + i) % size for i in range(n)]
        self._turn = (self._turn + n) % size
        unit = self.space.unit_coordinates
        for p in particles:
            if self.started[p] and self.stale[p] >= self.patience:  # stagnated: start afresh
                self.started[p] = False
                self.velocity[p] = 0.0
                self.personal_value[p] = FAILED
                self.stale[p] = 0
        moving = [p for p in particles if self.started[p] and self.values]
        batch, owners = [], []
        if moving:
            m = np.array(moving)
            glob = unit(self.best(1)[0])
            r1, r2 = self.rng.random((2, len(m), len(self.space.names)))
            self.velocity[m] = (
                self.inertia * self.velocity[m]
                + self.cognitive * r1 * (self.personal[m] - self.position[m])
                + self.social * r2 * (glob - self.position[m])
            )
            ids = self.nearest_unseen(np.clip(self.position[m] + self.velocity[m], 0.0, 1.0))
            batch += ids
            owners += moving[: len(ids)]
        starting = [p for p in particles if p not in moving]
        ids = self.space_filling(len(starting))
        batch += ids
        owners += starting[: len(ids)]
        for config_id, p in zip(batch, owners):
            self.position[p] = unit(config_id)
            if not self.started[p]:  # until it has a result, a particle's best is where it starts
                self.personal[p] = unit(config_id)
                self.started[p] = True
            self.pending[config_id] = p
        return batch + self.random_unseen(n - len(batch))

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        super().tell(results)
        for r in results:
            p = self.pending.pop(r.config_id, None)
            value = objective(r)
            if p is None:
                continue
            if value < self.personal_value[p]:
                self.personal_value[p] = value
                self.personal[p] = self.space.unit_coordinates(r.config_id)
                self.stale[p] = 0
            else:
                self.stale[p] += 1


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return ParticleSwarm(space, seed, **options)
