"""The registry: which names a spec may give as ``strategy``, and how options are refused."""

import importlib
import pkgutil

import pytest
from search_problems import LANDSCAPE, TINY

from mpitune import strategies
from mpitune.strategies.base import Strategy


def test_the_registered_names_are_exactly_the_modules_that_define_create():
    """A strategy module left out of the registry could not be chosen, and a helper module put
    in it would be offered as a strategy; either way a test parametrised over the registry
    would miss it."""
    modules = {
        m.name: importlib.import_module(f"mpitune.strategies.{m.name}")
        for m in pkgutil.iter_modules(strategies.__path__)
    }
    assert set(strategies.available()) == {name for name, module in modules.items() if hasattr(module, "create")}
    assert {"base", "geometry"} <= set(modules) - set(strategies.available())
    assert strategies.available() == sorted(strategies.available())


@pytest.mark.parametrize("name", strategies.available())
def test_create_gives_a_strategy_with_the_default_options(name):
    strategy = strategies.create(name, TINY, 0, {})
    assert isinstance(strategy, Strategy) and strategy.seed == 0 and strategy.space is TINY


def test_an_unknown_strategy_is_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown strategy 'base'; available: bayes_opt, brute_force, "):
        strategies.create("base", TINY, 0, {})


def test_an_unknown_option_is_refused_with_the_strategy_name():
    with pytest.raises(ValueError, match=r"strategy 'brute_force'.*population"):
        strategies.create("brute_force", TINY, 1, {"population": 2})


@pytest.mark.parametrize(
    "name, option, value, why",
    [
        ("genetic_algorithm", "population", 1, r"in \[2, 1e6\], got 1"),
        ("genetic_algorithm", "mutation_rate", 1.5, r"in \[0, 1\], got 1.5"),
        ("differential_evolution", "crossover_rate", -0.1, r"in \[0, 1\]"),
        ("differential_evolution", "population", 2.5, "an integer, got 2.5"),
        ("pso", "swarm_size", 0, r"in \[1, 1e6\]"),
        ("pso", "inertia", "fast", "a number, got 'fast'"),
        ("simulated_annealing", "cooling", 1.5, r"in \[1e-9, 1\]"),
        ("greedy_ils", "perturbation", 0, r"in \[1, "),
        ("bayes_opt", "candidates", 0, r"in \[1, "),
        ("bayes_opt", "initial_samples", True, "an integer, got True"),
        ("random_sample", "fraction", 2, r"in \(0, 1\], got 2"),
    ],
)
def test_bad_options_name_the_strategy_and_the_option(name, option, value, why):
    with pytest.raises(ValueError, match=f"strategy '{name}': {option} must be {why}"):
        strategies.create(name, LANDSCAPE, 0, {option: value})


def test_an_integer_will_do_for_a_number():
    assert strategies.create("simulated_annealing", TINY, 0, {"cooling": 1}).cooling == 1
