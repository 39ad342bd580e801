"""Search strategies: one module each, found by name.

A strategy module defines ``create(space, seed, **options) -> Strategy`` and is listed in
``REGISTERED``; the other modules here (the contract in ``base``, the shared ``geometry``)
are not strategies. Strategies speak ask/tell (see ``base.Strategy``) and know nothing of
ranks, devices, files or clocks.
"""

from __future__ import annotations

import importlib
from typing import Any

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

# The name a spec gives as ``strategy`` = the module that implements it.
REGISTERED = ("bayes_opt", "brute_force", "differential_evolution", "genetic_algorithm", "greedy_ils", "pso",
              "random_sample", "simulated_annealing")


def available() -> list[str]:
    return sorted(REGISTERED)


def create(name: str, space: SearchSpace, seed: int, options: dict[str, Any]) -> Strategy:
    """Raise ValueError naming the option when the strategy refuses its options."""
    if name not in REGISTERED:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"{__name__}.{name}")
    try:
        strategy: Strategy = module.create(space, seed, **options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"strategy {name!r}: {exc}") from None
    return strategy
