"""Strategy options as data: each strategy's ``OPTIONS`` table is what checks a spec's
``strategy_options``, what ``create`` is given, and what docs/strategies.md shows."""

from __future__ import annotations

import re

import pytest
from conftest import REPO
from search_problems import LANDSCAPE, TINY

from mpitune import strategies
from mpitune.strategies.options import Choice, Option, UnknownOption, values

TABLES = {name: strategies.options_of(name) for name in strategies.available()}
EVERY_OPTION = [(name, option) for name, table in TABLES.items() for option in table]


@pytest.mark.parametrize("name, option", EVERY_OPTION, ids=[f"{n}-{o.name}" for n, o in EVERY_OPTION])
def test_every_default_is_of_its_kind_and_in_its_range(name, option):
    assert type(option.default) is option.kind
    assert option.check(option.default) == option.default
    assert option.meaning and "\n" not in option.meaning


@pytest.mark.parametrize("name", strategies.available())
def test_a_table_names_each_option_once(name):
    names = [option.name for option in TABLES[name]]
    assert len(names) == len(set(names))


def test_create_is_given_every_option_checked_with_the_defaults_filled_in():
    pso = strategies.create("pso", LANDSCAPE, 0, {"inertia": 1, "swarm_size": 7})
    assert type(pso.inertia) is float and pso.inertia == 1.0  # a number given as an integer
    assert len(pso.position) == 7
    assert (pso.cognitive, pso.social, pso.patience) == (2.0, 1.0, 5)  # the table's defaults
    portfolio = strategies.create("portfolio", TINY, 0, {"population": 4})
    assert portfolio.breeder.population == 4
    assert (portfolio.breeder.mutation_rate, portfolio.breeder.crossover_rate) == (0.1, 0.9)


def test_an_integer_option_refuses_a_float_and_a_bool_a_number_refuses_a_bool():
    count = Option("count", int, 3, "how many", 1, 10)
    share = Option("share", float, 0.5, "how much", 0, 1, open_below=True)
    with pytest.raises(ValueError, match=r"^count must be an integer, got 3.0$"):
        count.check(3.0)
    with pytest.raises(ValueError, match=r"^count must be an integer, got True$"):
        count.check(True)
    with pytest.raises(ValueError, match=r"^share must be a number, got False$"):
        share.check(False)
    with pytest.raises(ValueError, match=r"^share must be in \(0, 1\], got 0$"):
        share.check(0)
    assert share.check(1) == 1.0 and count.check(10) == 10


def test_a_choice_refuses_a_value_in_its_range_but_not_among_its_values():
    nu = Choice("nu", float, 2.5, "how smooth", 0.5, 2.5, allowed=(0.5, 1.5, 2.5))
    assert nu.check(1.5) == 1.5 and type(nu.check(1.5)) is float
    with pytest.raises(ValueError, match=r"^nu must be one of 0\.5, 1\.5, 2\.5, got 1$"):
        nu.check(1)
    with pytest.raises(ValueError, match=r"^nu must be in \[0\.5, 2\.5\], got 3\.5$"):
        nu.check(3.5)  # the range first, as every option says it


def test_an_unknown_option_is_one_line_listing_every_option_with_its_meaning():
    with pytest.raises(UnknownOption) as err:
        strategies.create("differential_evolution", TINY, 0, {"popsize_": 3})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("strategy 'differential_evolution' has no option 'popsize_'; its options: ")
    for option in TABLES["differential_evolution"]:
        assert option.describe() in message
    with pytest.raises(UnknownOption, match=r"'T' \(Kernel Tuner's starting temperature"):
        strategies.create("simulated_annealing", TINY, 0, {"T": 3})
    with pytest.raises(UnknownOption, match=r"has no option 'population'; it takes none$"):
        values("brute_force", (), {"population": 2}, {})


def test_translate_checks_the_values_and_keeps_them_as_given():
    """Spec time refuses a bad value before anything runs; the values a run records (and a
    resumed run compares) stay as the user wrote them."""
    translated = strategies.translate("pso", {"popsize": 8, "cognitive": 2})
    assert translated.values == {"swarm_size": 8, "cognitive": 2} and type(translated.values["cognitive"]) is int
    assert translated.renamed == {"popsize": "swarm_size"}
    with pytest.raises(ValueError, match=r"strategy 'pso': swarm_size must be in \[1, 1e6\], got 0"):
        strategies.translate("pso", {"popsize": 0})


def documented_options() -> list[tuple[str, ...]]:
    """The rows of the table under "## Options" in docs/strategies.md, backticks dropped."""
    text = (REPO / "docs" / "strategies.md").read_text()
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [tuple(cell.strip().strip("`") for cell in row.strip("|").split(" | ")) for row in rows]
    assert all(len(row) == 6 for row in cells), cells
    return cells


def test_the_docs_table_of_options_is_the_tables_of_the_code():
    documented = documented_options()
    declared = [(name, o.name, o.kind_name, str(o.default), o.range, o.meaning) for name, o in EVERY_OPTION]
    assert sorted(documented) == sorted(declared)
    for name in TABLES:  # each strategy's options in the order of its table
        assert [row[1] for row in documented if row[0] == name] == [o.name for o in TABLES[name]]
    section = (REPO / "docs" / "strategies.md").read_text().split("\n## Options\n", 1)[1]
    for name in (name for name, table in TABLES.items() if not table):
        assert re.search(rf"`{name}` takes no options", section), name
