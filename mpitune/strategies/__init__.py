"""Search strategies: one module each, found by name.

A strategy module declares its options in ``OPTIONS``, a tuple of ``options.Option``.
It defines ``create(space, seed, **options) -> Strategy`` and is listed in ``REGISTERED``.
``create`` is given every option checked, with defaults filled in.
The other modules here are not strategies: ``base`` (the contract), ``geometry``, ``surrogate``
and ``options``. Strategies speak ask/tell (see ``base.Strategy``). They know nothing of ranks,
devices, files or clocks.

A spec ported from Kernel Tuner may use Kernel Tuner's names. A strategy name is taken as ours.
So is an option name that means what one of ours means. An option with no equivalent is refused,
with what to set instead. So a port never runs silently on defaults.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mpitune.model.prior import Prior
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import options
from mpitune.strategies.base import Strategy
from mpitune.strategies.options import Option

# The name a spec gives as ``strategy`` = the module that implements it.
REGISTERED = (
    "bayes_opt",
    "brute_force",
    "differential_evolution",
    "genetic_algorithm",
    "greedy_ils",
    "nsga2",
    "portfolio",
    "pso",
    "random_sample",
    "simulated_annealing",
)
# Kernel Tuner's strategy names that differ from ours for the same kind of search.
KERNEL_TUNER_STRATEGIES = {"diff_evo": "differential_evolution"}
# Per strategy, Kernel Tuner's option names that mean what ours mean (same role, same scale).
KERNEL_TUNER_OPTIONS: dict[str, dict[str, str]] = {
    "genetic_algorithm": {"popsize": "population"},
    "differential_evolution": {"popsize": "population"},
    "pso": {"popsize": "swarm_size", "w": "inertia", "c1": "cognitive", "c2": "social"},
    "simulated_annealing": {"alpha": "cooling"},
    "bayes_opt": {"popsize": "initial_samples"},
}
# Kernel Tuner's options with no equivalent here, and why.
NO_EQUIVALENT = {
    "maxiter": "Kernel Tuner's number of generations or iterations; the budget here is max_fevals or time_limit",
    "method": "Kernel Tuner's choice of variant; each strategy here has one (docs/strategies.md)",
    "mutation_chance": "Kernel Tuner's 1-in-N chance that a child mutates; mutation_rate here is the chance "
    "that each parameter is resampled",
    "T": "Kernel Tuner's starting temperature; temperature here is relative to the spread of the log times",
    "T_min": "Kernel Tuner's end temperature; min_temperature here is relative to the spread of the log times",
    "neighbor": "greedy_ils here tries neighbours one parameter away, next value up or down first",
    "restart": "greedy_ils here moves to the best of each batch that improves",
    "no_improvement": "greedy_ils here restarts when the neighbourhood is used up",
    "random_walk": "Kernel Tuner's share of the parameters mutated; perturbation here counts random-walk steps",
}


@dataclass(frozen=True)
class Translated:
    """A strategy's options under our names, and which of Kernel Tuner's names were taken for them."""

    values: dict[str, Any]
    renamed: dict[str, str]  # Kernel Tuner's name -> ours


def available() -> list[str]:
    return sorted(REGISTERED)


def resolve(name: str) -> str | None:
    """Our strategy of that name or of that Kernel Tuner name; None if there is none."""
    name = KERNEL_TUNER_STRATEGIES.get(name, name)
    return name if name in REGISTERED else None


def options_of(name: str) -> tuple[Option, ...]:
    """The options a registered strategy takes: its module's ``OPTIONS``."""
    table: tuple[Option, ...] = _module(name).OPTIONS
    return table


def translate(name: str, given: Mapping[str, Any]) -> Translated:
    """``given`` under our names, checked.

    Raises ValueError naming an option the strategy does not take (``options.UnknownOption``).
    It does the same for a value the strategy refuses. The values stay as given, an integer for a
    number too. They are part of what a resumed run compares."""
    aliases = KERNEL_TUNER_OPTIONS.get(name, {})
    values: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for key, value in given.items():
        ours = aliases.get(key, key)
        if ours != key:
            renamed[key] = ours
        if ours in values:
            raise ValueError(f"{key!r} and {ours!r} set the same option of strategy {name!r}; keep one")
        values[ours] = value
    options.values(name, options_of(name), values, NO_EQUIVALENT)
    return Translated(values, renamed)


def create(name: str, space: SearchSpace, seed: int, given: Mapping[str, Any], prior: Prior | None = None) -> Strategy:
    """Raise ValueError naming the option when the strategy refuses its options."""
    if name not in REGISTERED:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(available())}")
    make: Callable[..., Strategy] = _module(name).create
    strategy = make(space, seed, **options.values(name, options_of(name), given, NO_EQUIVALENT))
    if prior is not None:
        strategy.start_from(prior)
    return strategy


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")
