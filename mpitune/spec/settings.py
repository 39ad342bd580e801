"""How to search: the run settings merged from what a spec says and what the command line
overrides, row by row of the table in settings_table.py; the default strategy; the priors.

Kernel Tuner's names for a strategy and its options are taken where ours mean the same
(``diff_evo``, ``popsize``, ...), and said once, so that a port runs and its author learns our names.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpitune import strategies
from mpitune.errors import not_a_file
from mpitune.model.problem import RunSettings
from mpitune.spec.checker import Checker
from mpitune.spec.settings_table import BUDGET_OPTIONS, BY_NAME, SETTINGS, SPEC_DEFAULTS, Setting
from mpitune.strategies.options import UnknownOption

log = logging.getLogger(__name__)
HELP_WIDTH = 100  # characters per line of the strategies' options in --help


@dataclass(frozen=True, init=False)
class Overrides:
    """The command line's settings, by their names in ``SETTINGS``: those it gives. A setting
    it leaves out (None, "" or nothing) is the spec's."""

    given: dict[str, Any]

    def __init__(self, **given: Any) -> None:
        unknown = sorted(set(given) - set(BY_NAME))
        if unknown:
            raise TypeError(f"no run setting {unknown[0]!r}; the settings: {', '.join(BY_NAME)}")
        kept = {name: value for name, value in given.items() if value is not None and value != "" and value != ()}
        object.__setattr__(self, "given", kept)

    def get(self, name: str) -> Any:
        """The command line's value of ``name``, else the setting's default."""
        return self.given.get(name, BY_NAME[name].default)

    def replaced(self, **given: Any) -> Overrides:
        """These with ``given`` in place of theirs."""
        return Overrides(**{**self.given, **given})


def default_strategy(has_budget: bool) -> str:
    """With a budget, the strategy that did best at 50 to 100 evaluations and over all budgets
    on the replayed development caches (docs/strategies.md, "The default"); without one every
    strategy measures the whole space, and brute force does so in order, at the least cost."""
    return "portfolio" if has_budget else "brute_force"


def strategies_help() -> str:
    """Every strategy with its options, from the strategies' own tables, for ``--help``: what a
    spec may set in ``strategy_options`` besides the budget."""
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
    """The settings of ``spec`` (its names, ``SPEC_DEFAULTS`` where it says nothing) and of the
    command line. The command line wins over ``strategy_options``, which wins over a top-level
    ``seed``; the spec's ``prior`` is added later (``add_prior``)."""
    options = spec["strategy_options"] or {}
    if not isinstance(options, dict):
        check.fail("strategy_options", "must be a dict")
    options = dict(options)
    # The budget by Kernel Tuner's names, which are also the fields an error line names.
    budget = {k: options.pop(k) for k in BUDGET_OPTIONS if k in options}
    given = {s.name: _given(s, spec, budget, overrides) for s in SETTINGS}
    has_budget = given["max_fevals"] is not None or given["time_limit_s"] is not None
    values: dict[str, Any] = _strategy(check, given["strategy"] or default_strategy(has_budget), options)
    for setting in SETTINGS:
        if setting.check is not None:
            values.update(setting.settled(check, given[setting.name]))
    values["prior"] = tuple(os.path.abspath(p) for p in overrides.get("prior") or ())
    values["prior_any_kernel"] = bool(overrides.get("prior_any_kernel"))
    return RunSettings(**values)


def _given(setting: Setting, spec: Mapping[str, Any], budget: Mapping[str, Any], overrides: Overrides) -> Any:
    """A setting's value as given: by the command line, else in ``strategy_options``, else by
    the spec's name (its default where the spec has none)."""
    if setting.name in overrides.given:
        return overrides.given[setting.name]
    if setting.budget and setting.field in budget:
        return budget[setting.field]
    return spec[setting.field] if setting.spec else setting.default


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
    """A spec's search settings as ``given``, the defaults for the rest: what a replay without a
    spec searches by."""
    return {**SPEC_DEFAULTS, **given}


def _each_file_once(check: Checker, paths: list[str], cache_path: str) -> tuple[str, ...]:
    """The priors, each file once under the first name it was given: a file is the same by its
    device and inode, whatever the path, symbolic or hard link that names it. The run's own
    results file is refused under any name (its results are this search's, not a prior's)."""
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
    """``settings`` with the spec's ``prior`` (a path or a list of them, relative to ``base_dir``)
    before the command line's, each file once; ``prior_any_kernel`` as the spec says, unless the
    command line set it. Whether each is a prior of this space is found once the space is built
    (scheduling/prepare.py)."""
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
