"""Search strategies: one module each, found by name.

A strategy module defines ``create(space, seed, **options) -> Strategy`` and is listed in
``REGISTERED``; the other modules here (the contract in ``base``, the shared ``geometry``)
are not strategies. Strategies speak ask/tell (see ``base.Strategy``) and know nothing of
ranks, devices, files or clocks.

A spec ported from Kernel Tuner may use Kernel Tuner's names: a strategy name and the option
names that mean what one of ours means are taken as ours; an option that has no equivalent
is refused with what to set instead, so that a port never runs silently on defaults.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy

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
class Options:
    """A strategy's options under our names, and which of Kernel Tuner's names were taken for them."""

    values: dict[str, Any]
    renamed: dict[str, str]  # Kernel Tuner's name -> ours


def available() -> list[str]:
    return sorted(REGISTERED)


def resolve(name: str) -> str | None:
    """Our strategy of that name or of that Kernel Tuner name; None if there is none."""
    name = KERNEL_TUNER_STRATEGIES.get(name, name)
    return name if name in REGISTERED else None


def option_names(name: str) -> list[str]:
    """The options a registered strategy takes, in the order of its ``create``."""
    code = importlib.import_module(f"{__name__}.{name}").create.__code__
    return list(code.co_varnames[2 : code.co_argcount + code.co_kwonlyargcount])  # after space and seed


def translate(name: str, options: dict[str, Any]) -> Options:
    """``options`` under our names; raise ValueError naming an option the strategy does not take."""
    aliases = KERNEL_TUNER_OPTIONS.get(name, {})
    values: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for key, value in options.items():
        ours = aliases.get(key, key)
        if ours != key:
            renamed[key] = ours
        if ours in values:
            raise ValueError(f"{key!r} and {ours!r} set the same option of strategy {name!r}; keep one")
        values[ours] = value
    _check_known(name, values)
    return Options(values, renamed)


def _check_known(name: str, options: dict[str, Any]) -> None:
    valid = option_names(name)
    for key in options:
        if key not in valid:
            why = f" ({NO_EQUIVALENT[key]})" if key in NO_EQUIVALENT else ""
            takes = f"its options: {', '.join(valid)}" if valid else "it takes none"
            raise ValueError(f"strategy {name!r} has no option {key!r}{why}; {takes}")


def create(name: str, space: SearchSpace, seed: int, options: dict[str, Any]) -> Strategy:
    """Raise ValueError naming the option when the strategy refuses its options."""
    if name not in REGISTERED:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(available())}")
    _check_known(name, options)
    module = importlib.import_module(f"{__name__}.{name}")
    try:
        strategy: Strategy = module.create(space, seed, **options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"strategy {name!r}: {exc}") from None
    return strategy
