"""The default strategy on a real measured space (a Kernel Tuner cache of the development set,
skipped where it is absent): deterministic for a seed, and clearly better than random
sampling at a small budget."""

import math

import numpy as np
import pytest
from records import scored

from mpitune import strategies
from mpitune.model.searchspace import SearchSpace
from mpitune.spec.settings import default_strategy
from mpitune.store import measured

BUDGET, RANKS, SEEDS = 48, 8, range(4)


@pytest.fixture(scope="module")
def cache(pnpoly):
    data = measured.load(str(pnpoly))
    space = SearchSpace.from_configs(data.tune_params, data.configs)
    by_config = data.lookup()
    records = [by_config[tuple(space.config(i).values())] for i in range(len(space))]
    times = np.array([m.time_ms if m.status == "ok" else math.nan for m in records])
    return space, times


def search(space, times, name: str, seed: int) -> list[int]:
    """Batches of RANKS as the scheduler asks them, failures told as failures."""
    strategy = strategies.create(name, space, seed, {})
    asked: list[int] = []
    while len(asked) < BUDGET:
        ids = strategy.ask(min(RANKS, BUDGET - len(asked)))
        asked += ids
        results = []
        for i in ids:
            ok = not math.isnan(times[i])
            ms = float(times[i])
            results.append(scored(i, "ok" if ok else "runtime_error", time_ms=ms))
        strategy.tell(results)
    return asked


def score(times: np.ndarray, asked: list[int]) -> float:
    median, optimum = np.nanmedian(times), np.nanmin(times)
    return float((median - np.nanmin(times[asked])) / (median - optimum))


def test_the_default_is_deterministic_and_beats_random_sampling_at_48_evaluations(cache):
    space, times = cache
    name = default_strategy(has_budget=True)
    runs = [search(space, times, name, seed) for seed in SEEDS]
    assert search(space, times, name, 0) == runs[0]
    ours = np.mean([score(times, asked) for asked in runs])
    random = np.mean([score(times, search(space, times, "random_sample", seed)) for seed in SEEDS])
    assert ours > random + 0.05, (ours, random)
