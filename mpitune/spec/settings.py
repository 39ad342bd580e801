"""How to search: the run settings, the default strategy and the priors.

The settings are merged row by row of the table in settings_table.py. The command line, the
environment and the spec each give some. Kernel Tuner's names for a strategy and its options are
taken where ours mean the same (``diff_evo``, ``popsize``, ...). Each is said once in a warning.
So a port runs, and its author learns our names.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, cast

from mpitune import strategies
from mpitune.errors import not_a_file
from mpitune.model.problem import Devices, RunSettings
from mpitune.spec.checker import Checker
from mpitune.spec.setting_rows import UNWRITTEN, Setting
from mpitune.spec.settings_table import (
    BUDGET_OPTIONS,
    BY_NAME,
    MAX_FEVALS,
    PRIOR,
    PRIOR_ANY_KERNEL,
    SETTINGS,
    SPEC_DEFAULTS,
    STRATEGY,
    TIME_LIMIT,
)
from mpitune.strategies.options import UnknownOption

log = logging.getLogger(__name__)
T = TypeVar("T")
HELP_WIDTH = 100  # characters per line of the strategies' options in --help


@dataclass(frozen=True, init=False)
class Overrides:
    """The settings the command line gives, each under its row of the table.

    Made with the rows' names as keywords: ``Overrides(max_fevals=3)``. An unknown name is a
    ``TypeError``, as for any class. Read by row, typed as the row is: ``overrides[MAX_FEVALS]``
    is an ``int | None``. A setting left out (None, "" or ()) is the environment's or the spec's.
    """

    given: Mapping[Setting[Any], Any]

    def __init__(self, **given: Any) -> None:
        unknown = sorted(set(given) - set(BY_NAME))
        if unknown:
            raise TypeError(f"no run setting {unknown[0]!r}; the settings: {', '.join(BY_NAME)}")
        kept = {
            BY_NAME[name]: value for name, value in given.items() if value is not None and value != "" and value != ()
        }
        object.__setattr__(self, "given", MappingProxyType(kept))

    def __getitem__(self, row: Setting[T]) -> T:
        """The command line's value of ``row``, else its default."""
        return cast(T, self.given.get(row, row.default))

    def replaced(self, **given: Any) -> Overrides:
        """These with ``given`` in place of theirs."""
        return Overrides(**{**{row.name: value for row, value in self.given.items()}, **given})


def default_strategy(has_budget: bool) -> str:
    """The strategy a spec that names none runs.

    With a budget, the one that did best on the replayed development caches, at 50 to 100
    evaluations and over all budgets (docs/strategies.md, "The default"). Without one, every
    strategy measures the whole space. Brute force does so in order, at the least cost."""
    return "portfolio" if has_budget else "brute_force"


def strategies_help() -> str:
    """Every strategy with its options, from the strategies' own tables, for ``--help``. They
    are what a spec may set in ``strategy_options`` besides the budget."""
    lines = [
        "strategies (--strategy NAME) and their options (the spec's strategy_options, besides the budget: "
        f"{', '.join(BUDGET_OPTIONS)}; docs/strategies.md):"
    ]
    for name in strategies.available():
        table = strategies.options_of(name)
        lines.append(f"  {name}" + ("" if table else ": no options"))
        for option in table:
            lines += textwrap.wrap(
                option.describe(), HELP_WIDTH, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False
            )
    return "\n".join(lines)


def run_settings(check: Checker, spec: Mapping[str, Any], overrides: Overrides) -> RunSettings:
    """The settings of the command line, the environment and ``spec``, merged row by row.

    Each row takes its first source that has a value (``setting_rows.SOURCES``). Within the spec,
    ``strategy_options`` wins over a top-level ``seed``. The spec's ``prior`` is added later
    (``add_prior``).

    Args:
        check: names the spec in error lines.
        spec: the spec's names, ``SPEC_DEFAULTS`` where it says nothing.
        overrides: what the command line gives.

    Returns:
        The checked settings.
    """
    options = spec["strategy_options"] or {}
    if not isinstance(options, dict):
        check.fail("strategy_options", "must be a dict")
    options = dict(options)
    # The budget by Kernel Tuner's names, which are also the fields an error line names.
    budget = {k: options.pop(k) for k in BUDGET_OPTIONS if k in options}
    taken = [s for s in SETTINGS if s.check is not None] + [STRATEGY]
    given = {s: _given(s, spec, budget, overrides) for s in taken}
    has_budget = given[MAX_FEVALS] is not None or given[TIME_LIMIT] is not None
    values: dict[str, Any] = _strategy(check, given[STRATEGY] or default_strategy(has_budget), options)
    for setting in taken:
        if setting.check is not None:
            values.update(setting.settled(check, given[setting]))
    values["prior"] = tuple(os.path.abspath(p) for p in overrides[PRIOR] or ())
    values["prior_any_kernel"] = bool(overrides[PRIOR_ANY_KERNEL])
    if values["portable"] and values["devices"] is not Devices.EACH:
        check.fail("portable", 'needs devices = "each" (--devices each): it compares the device models of one job')
    return RunSettings(**values)


def _given(setting: Setting[Any], spec: Mapping[str, Any], budget: Mapping[str, Any], overrides: Overrides) -> Any:
    """A setting's value as given, unchecked. The spec writes it in ``strategy_options``, else by
    its name. A setting the spec cannot name is ``UNWRITTEN`` there."""
    if setting.budget and setting.field in budget:
        written = budget[setting.field]
    else:
        written = spec[setting.field] if setting.spec else UNWRITTEN
    return setting.merged(overrides.given.get(setting), written)


def _strategy(check: Checker, requested: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The strategy by our name, and its options translated and checked."""
    strategy = strategies.resolve(requested) if isinstance(requested, str) else None
    if strategy is None:
        check.fail("strategy", f"unknown strategy {requested!r}; available: {', '.join(strategies.available())}")
    if strategy != requested:
        log.warning("strategy %r is Kernel Tuner's name; running %r", requested, strategy)
    try:
        translated = strategies.translate(strategy, options)
    except UnknownOption as exc:
        check.fail("strategy_options", f"{exc} (and the budget: {', '.join(BUDGET_OPTIONS)})")
    except ValueError as exc:
        check.fail("strategy_options", str(exc))
    for theirs, ours in translated.renamed.items():
        log.warning("strategy_options: %r is Kernel Tuner's name; taken as %s's %r", theirs, strategy, ours)
    return {"strategy": strategy, "strategy_options": translated.values}


def search_fields(**given: Any) -> dict[str, Any]:
    """A spec's search settings as ``given``, the defaults for the rest. A replay without a spec
    searches by them."""
    return {**SPEC_DEFAULTS, **given}


def _each_file_once(check: Checker, paths: list[str], cache_path: str) -> tuple[str, ...]:
    """The priors, each file once under the first name it was given.

    A file is the same by its device and inode, whatever path or link names it. The run's own
    results file is refused under any name: its results are this search's, not a prior's."""
    own = _identity(cache_path)
    kept: dict[tuple[int, int] | str, str] = {}
    for path in paths:
        if not os.path.isfile(path):  # the command line's, unchecked so far
            check.fail("prior", f"{path} {not_a_file(path) or 'not found'}")
        identity = _identity(path)
        if identity is not None and identity == own:
            check.fail("prior", f"{path} is this run's own results file {cache_path}, not a prior")
        kept.setdefault(identity or path, path)
    return tuple(kept.values())


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # nothing there: the same as no other file
    return st.st_dev, st.st_ino


def add_prior(check: Checker, given: Any, any_kernel: Any, base_dir: str, settings: RunSettings) -> RunSettings:
    """``settings`` with the spec's ``prior`` before the command line's, each file once.

    ``given`` is a path or a list of them, relative to ``base_dir``. ``prior_any_kernel`` is as
    the spec says, unless the command line set it. Whether each is a prior of this space is found
    once the space is built (scheduling/prepare.py)."""
    if given is None:
        given = []
    if isinstance(given, (str, Path)):
        given = [given]
    if not isinstance(given, (list, tuple)) or not all(isinstance(p, (str, Path)) and str(p) for p in given):
        check.fail("prior", f"must be a path or a list of paths (mpitune files or Kernel Tuner caches), got {given!r}")
    paths = [os.path.abspath(os.path.join(base_dir, str(p))) for p in given]
    for path, written in zip(paths, given):
        if not os.path.isfile(path):
            check.fail("prior", f"file {str(written)!r} {not_a_file(path) or 'not found'} (looked in {base_dir})")
    prior = _each_file_once(check, [*paths, *settings.prior], settings.cache_path)
    if not isinstance(any_kernel, bool):
        check.fail("prior_any_kernel", f"must be True or False, got {any_kernel!r}")
    return dataclasses.replace(settings, prior=prior, prior_any_kernel=settings.prior_any_kernel or any_kernel)
