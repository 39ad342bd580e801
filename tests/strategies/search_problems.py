"""Search problems the strategy tests share: a tiny space to drain, a kernel-like landscape
to search, and the ask/tell loop the scheduler runs, without MPI."""

from __future__ import annotations

import math
from collections.abc import Callable

from records import scored

from mpitune import strategies
from mpitune.model.restrictions import Restriction
from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

TINY = SearchSpace.build({"a": [1, 2, 3, 4], "b": [1, 2, 3]}, [Restriction("a + b != 5", ["a", "b"])])
# Small enough options that the populations, swarms and initial designs fit the tiny space.
SMALL = {
    "bayes_opt": {"initial_samples": 4},
    "differential_evolution": {"population": 4},
    "genetic_algorithm": {"population": 4},
    "nsga2": {"population": 4},
    "pso": {"swarm_size": 4},
}

LANDSCAPE_PARAMS = {
    "bx": [16, 32, 64, 128, 256, 512, 1024, 2048],
    "by": [1, 2, 4, 8, 16, 32, 64, 128],
    "tile": [1, 2, 3, 4, 5, 6],
    "unroll": [0, 1, 2, 3],
    "shared": [0, 1, 2],
}
LANDSCAPE = SearchSpace.build(LANDSCAPE_PARAMS, [Restriction("bx * by <= 32768", list(LANDSCAPE_PARAMS))])

# The strategies a search must beat; every other registered strategy is a searcher.
BASELINES = ("brute_force", "random_sample")
SEARCHERS = [name for name in strategies.available() if name not in BASELINES]


def landscape_ms(config_id: int) -> float:
    """A kernel-like landscape: a smooth valley with interacting parameters, a deterministic
    rugged term, and a failing corner (too many threads with big tiles); NaN = failure."""
    x = LANDSCAPE.indices[config_id].astype(float)
    if x[0] + x[1] >= 11 and x[2] >= 3:
        return math.nan
    valley = (x[0] - 4.6) ** 2 + 0.7 * (x[1] - 2.3) ** 2 + 0.8 * (x[2] - 3.4) ** 2 + 0.3 * (x[0] - x[1] - 2) ** 2
    rugged = 0.2 * math.sin(7.0 * config_id) + 0.6 * (x[3] - 2) ** 2 + 0.5 * (x[4] == 1)
    return 1.0 + valley + rugged


def flat(config_id: int) -> float:
    return 1.0  # nothing ever improves: every population and chain stagnates


def result(config_id: int, ms: float) -> Scored:
    """Scored as rank 0 scores a time objective: the time, inf for a failure."""
    ok = math.isfinite(ms)
    return scored(config_id, "ok" if ok else "runtime_error", time_ms=ms)


def run(strategy: Strategy, n: int, budget: int, measure: Callable[[int], float]) -> list[int]:
    """Ask for ``min(n, budget left)`` ids and tell their results, as the scheduler does."""
    out: list[int] = []
    while len(out) < budget and (batch := strategy.ask(min(n, budget - len(out)))):
        assert len(batch) <= n
        out.extend(batch)
        strategy.tell([result(i, measure(i)) for i in batch])
    return out


def run_pipelined(
    strategy: Strategy, n: int, budget: int, measure: Callable[[int], float], depth: int = 2
) -> list[int]:
    """As ``run``, in the order the scheduler asks and tells with ``depth`` batches in flight
    (depth 2: ask(0), ask(1), tell(0), ask(2), tell(1), ...): batch b is asked once batch
    b - depth is told, and what is left in flight is told at the end."""
    batches: list[list[int]] = []
    told = 0
    while sum(map(len, batches)) < budget:
        while told <= len(batches) - depth:
            strategy.tell([result(i, measure(i)) for i in batches[told]])
            told += 1
        batch = strategy.ask(min(n, budget - sum(map(len, batches))))
        if not batch:
            break
        assert len(batch) <= n
        batches.append(batch)
    for batch in batches[told:]:
        strategy.tell([result(i, measure(i)) for i in batch])
    return [i for batch in batches for i in batch]


def make(name: str, space: SearchSpace = LANDSCAPE, seed: int = 0, **options) -> Strategy:
    return strategies.create(name, space, seed, {**(SMALL.get(name, {}) if space is TINY else {}), **options})
