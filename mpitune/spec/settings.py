"""How to search: the run settings from what a spec says about the search and what the command
line overrides, the default strategy, and whether the results file can be written.

Kernel Tuner's names for a strategy and its options are taken where ours mean the same
(``diff_evo``, ``popsize``, ...), and said once, so that a port runs and its author learns our names.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpitune import strategies
from mpitune.errors import not_a_file
from mpitune.model.judging.racing import RaceRule
from mpitune.model.problem import RunSettings, Schedule
from mpitune.model.work import DEFAULT_CANDIDATES, MOST_CANDIDATES
from mpitune.spec.checker import Checker
from mpitune.spec.kernel_tuner import BUDGET_OPTIONS
from mpitune.strategies.options import UnknownOption

log = logging.getLogger(__name__)
HELP_WIDTH = 100  # characters per line of the strategies' options in --help


@dataclass(frozen=True)
class Overrides:
    """The command line's settings; None (or the default) where it leaves the spec's."""

    strategy: str | None = None
    max_fevals: int | None = None
    time_limit_s: float | None = None
    seed: int | None = None
    cache_path: str | None = None
    batch_size: int | None = None
    compile_workers: int | None = None
    stop_file: str = ""
    allow_mixed_devices: bool = False
    isolate: bool = True
    racing: bool | str | None = None  # True, False or a RaceRule's value
    confirm: bool | int | None = None  # True, False or a number of candidates
    calibrate: bool | None = None
    schedule: str | None = None  # a Schedule's value
    rank_deadline_floor_s: float | None = None
    prior: tuple[str, ...] = ()  # added to the spec's, relative to the working directory
    prior_any_kernel: bool = False


@dataclass(frozen=True)
class SearchFields:
    """What a spec says about the search, as written; ``run_settings`` checks it."""

    strategy: Any = None
    strategy_options: Any = None
    seed: Any = None
    compile_workers: Any = None
    cache: Any = None
    racing: Any = True
    confirm: Any = True
    calibrate: Any = True
    device_margin: Any = 0.02
    schedule: Any = Schedule.AUTO.value

    @classmethod
    def of(cls, spec: dict[str, Any]) -> SearchFields:
        return cls(
            strategy=spec["strategy"],
            strategy_options=spec["strategy_options"],
            seed=spec["seed"],
            compile_workers=spec["compile_workers"],
            cache=spec["cache"],
            racing=spec["racing"],
            confirm=spec["confirm"],
            calibrate=spec["calibrate"],
            device_margin=spec["device_margin"],
            schedule=spec["schedule"],
        )


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


def run_settings(check: Checker, fields: SearchFields, overrides: Overrides) -> RunSettings:
    """The command line wins over ``strategy_options``, which wins over a top-level ``seed``."""
    options = fields.strategy_options or {}
    if not isinstance(options, dict):
        check.fail("strategy_options", "must be a dict")
    options = dict(options)
    # The budget by Kernel Tuner's names, which are also the fields an error line names.
    budget = {k: options.pop(k) for k in BUDGET_OPTIONS if k in options}
    if fields.seed is not None:  # Kernel Tuner's tune_kernel(seed=...)
        budget.setdefault("seed", fields.seed)
    from_command_line = {
        "max_fevals": overrides.max_fevals,
        "time_limit": overrides.time_limit_s,
        "seed": overrides.seed,
    }
    budget.update({k: v for k, v in from_command_line.items() if v is not None})
    has_budget = budget.get("max_fevals") is not None or budget.get("time_limit") is not None
    requested = overrides.strategy or fields.strategy or default_strategy(has_budget)
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
    values: dict[str, Any] = {"strategy": strategy, "strategy_options": translated.values}
    if budget.get("max_fevals") is not None:
        values["max_fevals"] = check.int_("max_fevals", budget["max_fevals"], 1)
    if budget.get("time_limit") is not None:
        values["time_limit_s"] = check.number("time_limit", budget["time_limit"])
    if budget.get("seed") is not None:
        values["seed"] = check.int_("seed", budget["seed"], 0)
    values["schedule"] = schedule_setting(check, fields.schedule if overrides.schedule is None else overrides.schedule)
    values["stop_file"] = overrides.stop_file
    values["allow_mixed_devices"] = overrides.allow_mixed_devices
    if overrides.batch_size is not None:
        values["batch_size"] = check.int_("batch_size", overrides.batch_size, 1)
    workers = fields.compile_workers if overrides.compile_workers is None else overrides.compile_workers
    if workers is not None:
        values["compile_workers"] = check.int_("compile_workers", workers, 0)
    racing = fields.racing if overrides.racing is None else overrides.racing
    rules = {rule.value: rule for rule in RaceRule}
    if isinstance(racing, str) and racing in rules:
        values["racing"], values["race_rule"] = True, rules[racing]
    elif isinstance(racing, bool):  # True: the default rule, on the first launch (model/judging/racing.py)
        values["racing"], values["race_rule"] = racing, RaceRule.FIRST
    else:
        check.fail("racing", f"must be True, False or one of {', '.join(map(repr, rules))}, got {racing!r}")
    values["confirm"] = confirm_setting(check, fields.confirm if overrides.confirm is None else overrides.confirm)
    calibrate = fields.calibrate if overrides.calibrate is None else overrides.calibrate
    if not isinstance(calibrate, bool):
        check.fail("calibrate", f"must be True or False, got {calibrate!r}")
    values["calibrate"] = calibrate
    margin = check.number("device_margin", fields.device_margin, zero_ok=True)
    if not 0 <= margin < 1:
        check.fail("device_margin", f"must be a fraction from 0 to below 1 (0.02: 2 %), got {margin!r}")
    values["device_margin"] = margin
    if overrides.rank_deadline_floor_s is not None:
        values["rank_deadline_floor_s"] = check.number("rank_deadline_floor", overrides.rank_deadline_floor_s)
    cache = overrides.cache_path or fields.cache
    if cache is not None and not isinstance(cache, (str, Path)):
        check.fail("cache", f"must be a file path, got {cache!r}")
    values["cache_path"] = cache_path(check, cache or Path(check.path).stem + ".h5")
    values["prior"] = tuple(os.path.abspath(p) for p in overrides.prior)
    values["prior_any_kernel"] = overrides.prior_any_kernel
    return RunSettings(**values)


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
    (scheduling/session.py)."""
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


def confirm_setting(check: Checker, confirm: Any) -> int:
    """How many candidates to confirm once the search ends: ``True`` the default number, ``False``
    or 0 none, else a number up to the most a confirmation takes."""
    if confirm is True:
        return DEFAULT_CANDIDATES
    if confirm is False:
        return 0
    if isinstance(confirm, int) and 0 <= confirm <= MOST_CANDIDATES:
        return confirm
    check.fail("confirm", f"must be True, False or a number of candidates from 0 to {MOST_CANDIDATES}, got {confirm!r}")


def schedule_setting(check: Checker, schedule: Any) -> Schedule:
    """How rank 0 hands out work, by a Schedule's value; the line for a bad one names them all."""
    values = {s.value: s for s in Schedule}
    if not isinstance(schedule, str) or schedule not in values:
        check.fail("schedule", f"must be one of {', '.join(map(repr, values))}, got {schedule!r}")
    return values[schedule]


def cache_path(check: Checker, cache: str | Path) -> str:
    """The results file must be one mpitune can create or open: found here, not after start-up.
    Whether an existing file is one mpitune wrote, and whether the system lets this run write it
    (a read-only file system is not "permission denied", and ends with the exit code of a refused
    write), is the store's to say (the scheduler asks it before anything is written)."""
    path = os.path.abspath(cache)
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        check.fail("cache", f"{path} is a directory; name a file such as {os.path.join(path, 'results.h5')}")
    if not os.path.isdir(directory):
        check.fail("cache", f"cannot write {path}: directory {directory} does not exist")
    return path
