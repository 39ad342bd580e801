"""The run settings as data: one ``Setting`` each in ``SETTINGS``. The command line's flags, the
spec's names and defaults, the merge of spec and command line (settings.py) and docs/spec.md's
table of the search's settings are all read from it. Adding a setting is a row here, its field
in ``RunSettings`` (model/problem.py) and the code that uses it.

Light to import: the command line reads it before any verb (setting_checks.py says how).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpitune.errors import number_flag
from mpitune.spec import setting_checks as checks
from mpitune.spec.checker import Checker
from mpitune.spec.setting_checks import Check


@dataclass(frozen=True)
class Flag:
    """A setting's command-line flag. ``switch``: given means True; ``negates``: given means
    False (``--no-calibrate``); ``repeat``: each use adds a value. ``help`` may name
    ``{seconds}``, which a replay's parser says are simulated."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Callable[[], list[str]] | None = None  # called when the parser is built
    switch: bool = False
    negates: bool = False
    repeat: bool = False

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser, seconds: str) -> None:
        """The flag's argument in ``parser``."""
        extra: dict[str, Any] = {"help": self.help.format(seconds=seconds)}
        if self.switch or self.negates:
            extra["action"] = "store_true"
        if self.repeat:
            extra.update(action="append", default=[])
        if self.type is not None:
            extra["type"] = self.type
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        if self.choices is not None:
            extra["choices"] = self.choices()
        parser.add_argument(self.name, **extra)

    def given(self, args: argparse.Namespace) -> Any:
        """What the command line says, None where the flag is absent."""
        value = getattr(args, self.dest)
        if self.switch:
            return True if value else None
        if self.negates:
            return False if value else None
        if self.repeat:
            return tuple(value) or None
        return value

    @property
    def shown(self) -> str:
        """The flag as docs/spec.md's table shows it."""
        return f"`{self.name}{' ' + self.metavar if self.metavar else ''}`"


@dataclass(frozen=True)
class Setting:
    """One run setting. ``name``: its field in ``RunSettings`` and its keyword in ``Overrides``;
    ``field``: the name a spec and ``tune_kernel`` set it by, which error lines name (``name``
    where not given); ``default``: the spec's, as a spec writes it. ``budget``: also an entry of
    ``strategy_options``, where Kernel Tuner keeps the budget. ``check``: the value
    ``RunSettings`` holds, of ``fills`` where it fills several fields; None where settings.py
    merges it by hand. ``meaning`` and ``shown_default`` are docs/spec.md's."""

    name: str
    default: Any = None
    field: str = ""
    spec: bool = True  # False: the command line's alone
    budget: bool = False
    flag: Flag | None = None
    check: Check | None = None
    fills: tuple[str, ...] = ()
    meaning: str = ""
    shown_default: str = ""

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.name)

    def checked(self, check: Checker, value: Any) -> Any:
        """``value`` as ``RunSettings`` holds it; a ``SpecError`` naming ``field`` if it is wrong."""
        assert self.check is not None, f"{self.name} is merged by hand"
        return self.check(check, self.field, value)

    def settled(self, check: Checker, value: Any) -> dict[str, Any]:
        """The ``RunSettings`` fields ``value`` gives, checked; none where it is None (the
        field's default)."""
        checked = self.checked(check, value)
        if checked is None:
            return {}
        return dict(zip(self.fills, checked)) if self.fills else {self.name: checked}

    def row(self) -> str:
        """docs/spec.md's row."""
        flag = self.flag.shown if self.flag else ""
        return f"| `{self.field}` | {self.meaning} | {self.shown_default} | {flag} |"


_RACING = (
    '`True` (the same as `"first"`): a configuration whose verified launch (the first, which is also the warm-up) '
    "took longer than R1 x the best median known gets no timed launch, and one that survives it is stopped as under "
    '`"spread"` (R1: the largest first-launch/median ratio of a fully timed configuration in the run, never below '
    "R; exact for configurations whose first launch is no colder than the run has measured; the raced ones that "
    'stopped near the bound are timed again by the confirmation); `"majority"`: after each timed launch, a '
    "configuration more than half of whose `iterations` launches were above R x the best median known gets no more "
    "launches (so its median could not have been the best) (R: the largest slowest-launch/median spread of a fully "
    'timed configuration in the run, at least 1.3); `"spread"`: one whose every timed launch so far (from the '
    "first) was above R x the best, exact only for configurations no noisier than the run has measured "
    '(docs/performance.md, "Racing"); `False`: every launch of every configuration. A raced configuration keeps '
    "status `ok` with `raced = 1` and the `launches` it got; one stopped on its verified launch has that launch as "
    'its one time (`launches` 1, and no timed launch). Only with `objective = "time"`: with a metric or an observed '
    'value it is off (see docs/performance.md, "Racing")'
)
_SCHEDULE = (
    'how rank 0 hands out work on several ranks (docs/performance.md, "How work is handed out"): `"refill"`: '
    "each rank holds the configuration it measures and at most one order more, and rank 0 asks the strategy for "
    "more whenever half the ranks (an eighth, for strategies that know their order in advance) have no next one, "
    "and writes and tells each result as it arrives: busier ranks, but what the strategy knew at each ask depends "
    'on timing, so the same seed need not make the same search; `"batches"`: one chunk per rank per batch, the '
    "results written and told batch by batch, so that a rerun with the same seed makes the same search; "
    '`"auto"`: refill (docs/running.md, "Ranks and batches")'
)

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "strategy",
        flag=Flag("--strategy", "search strategy, one of those below (default: as the spec says, see docs/spec.md)"),
        meaning="a search strategy (see docs/strategies.md; Kernel Tuner's `diff_evo` is `differential_evolution`)",
        shown_default='`"portfolio"` with a budget (`max_fevals` or `time_limit`), else `"brute_force"`',
    ),
    Setting(
        "strategy_options",
        meaning="dict: `max_fevals`, `time_limit` (s), `seed`, and the strategy's own options (mpitune's names, "
        "e.g. `population`, not Kernel Tuner's `popsize`)",
        shown_default="`{}`",
    ),
    Setting(
        "max_fevals",
        spec=False,
        budget=True,
        flag=Flag("--max-fevals", "at most this many new configurations", type=int),
        check=checks.at_least(1),
    ),
    Setting(
        "time_limit_s",
        field="time_limit",
        spec=False,
        budget=True,
        flag=Flag("--time-limit", "stop handing out batches after S {seconds}", type=number_flag(), metavar="S"),
        check=checks.optional(checks.positive_seconds),
    ),
    Setting(
        "seed",
        budget=True,
        flag=Flag("--seed", "seed of the strategy's random numbers", type=int),
        check=checks.at_least(0),
        meaning="seeds the strategy, as Kernel Tuner's `seed`; `strategy_options`' `seed` takes precedence",
        shown_default="`0`",
    ),
    Setting(
        "batch_size",
        spec=False,
        flag=Flag(
            "--batch-size",
            "configurations per hand-out over all ranks (default: docs/performance.md, 'Chunks and batches')",
            type=int,
        ),
        check=checks.at_least(1),
    ),
    Setting(
        "schedule",
        "auto",
        flag=Flag(
            "--schedule",
            "how rank 0 hands out work on several ranks: refill (each rank refilled as it runs short: busier "
            "ranks, but the search depends on timing), batches (whole batches, the same search for a seed) or auto "
            "(refill; default: the spec's schedule, else auto; see docs/performance.md, 'How work is handed out')",
            choices=checks.schedules,
        ),
        check=checks.schedule,
        meaning=_SCHEDULE,
        shown_default='`"auto"`',
    ),
    Setting(
        "compile_workers",
        flag=Flag(
            "--compile-workers",
            "processes per rank compiling ahead while the device measures "
            "(default: the rank's cores minus one; 0: compile each configuration in turn)",
            type=int,
            metavar="N",
        ),
        check=checks.at_least(0),
        meaning="processes per rank compiling configurations ahead while the device measures; `0`: compile each "
        "in turn",
        shown_default='the rank\'s cores minus one, at least 1; `0` with `lang = "C"`',
    ),
    Setting(
        "racing",
        True,
        check=checks.racing,
        fills=("racing", "race_rule"),
        meaning=_RACING,
        shown_default="`True`",
    ),
    Setting(
        "confirm",
        True,
        flag=Flag(
            "--confirm",
            "once the search ends, time the N best candidates (and those tied with the best) again, "
            "interleaved on every rank, and name the winner and its ties (default: the spec's confirm, else 5; "
            "0: none; see docs/analysis.md, 'Confirmation')",
            type=int,
            metavar="N",
        ),
        check=checks.confirm,
        meaning="`True`: once the search has ended by itself (the space done, or `max_fevals` spent), time the 5 "
        "best candidates again, plus any whose search launches cannot be told from the best's (at most 16), one "
        "launch each per round, interleaved over every rank, and name the winner and the candidates statistically "
        'tied with it (docs/analysis.md, "Confirmation"); a number: that many best candidates (at most 16); '
        '`False` or `0`: none. Only with `objective = "time"`',
        shown_default="`True`",
    ),
    Setting(
        "calibrate",
        True,
        flag=Flag(
            "--no-calibrate",
            "do not time a reference configuration on every rank during the search to compare their devices "
            "(see docs/analysis.md, 'Calibration')",
            negates=True,
        ),
        check=checks.switch,
        meaning="`True`: on several ranks, every rank times a reference configuration (the first that passed, then "
        "the best so far) now and then, and the search compares times divided by each rank's device factor; the "
        'file keeps the raw times (docs/analysis.md, "Calibration"); `False`: none',
        shown_default="`True`",
    ),
    Setting(
        "device_margin",
        0.02,
        check=checks.fraction_margin,
        meaning="how far (a fraction) a rank's device factor may be from the median rank's, beyond its noise, "
        "before calibration and confirmation flag it",
        shown_default="`0.02`",
    ),
    Setting(
        "cache_path",
        field="cache",
        check=checks.cache,
        meaning="path of the HDF5 results file, relative to the current directory, in a directory that exists; a "
        "file already there must be HDF5; `--out PATH` overrides",
        shown_default="the spec's name with `.h5`, in the current directory",
    ),
    Setting(
        "prior",
        flag=Flag(
            "--prior",
            "start the search from measurements made elsewhere (another GPU, problem size or version): an "
            "mpitune file or a Kernel Tuner cache of the same kernel, matched on the parameters it shares; "
            "repeatable, added to the spec's prior (see docs/strategies.md, 'Priors')",
            metavar="FILE",
            repeat=True,
        ),
        meaning="a path or a list of paths, relative to the spec: measurements made elsewhere (another GPU, "
        "problem size or version of the kernel), each an mpitune file or a Kernel Tuner cache, that the search "
        "starts from, matched on the parameters they share with this space; `--prior FILE` adds to them "
        '(docs/strategies.md, "Priors: measurements from elsewhere")',
        shown_default="none",
    ),
    Setting(
        "prior_any_kernel",
        False,
        flag=Flag(
            "--prior-any-kernel",
            "take a prior whose kernel name differs from this run's (default: refuse it)",
            switch=True,
        ),
        meaning="`True`: take a prior whose kernel name differs from `kernel_name` (a renamed kernel); `False`: "
        "refuse it",
        shown_default="`False`",
    ),
    Setting(
        "stop_file",
        "",
        spec=False,
        flag=Flag(
            "--stop-file",
            "stop as on SIGTERM once PATH exists (job scripts touch it when Slurm signals)",
            metavar="PATH",
        ),
        check=checks.text,
    ),
    Setting(
        "isolate",
        True,
        spec=False,
        flag=Flag(
            "--no-isolation",
            "measure in the rank's own process: no per-configuration deadline, a crash ends the job",
            negates=True,
        ),
    ),
    Setting(
        "rank_deadline_floor_s",
        field="rank_deadline_floor",
        spec=False,
        flag=Flag(
            "--rank-deadline-floor",
            "wait at least S seconds for a rank's batch before calling the rank silent and ending the run "
            "(default 45, or $MPITUNE_RANK_DEADLINE_FLOOR_S; see docs/reliability.md)",
            type=number_flag(),
            metavar="S",
        ),
        check=checks.optional(checks.positive_seconds),
    ),
    Setting(
        "allow_mixed_devices",
        False,
        spec=False,
        flag=Flag(
            "--allow-mixed-devices",
            "run even when the ranks have different device models (their timings differ)",
            switch=True,
        ),
        check=checks.switch,
    ),
)
BY_NAME = {setting.name: setting for setting in SETTINGS}
# The spec's names of the settings, with their defaults: Kernel Tuner's tune_kernel keywords.
SPEC_DEFAULTS = {setting.field: setting.default for setting in SETTINGS if setting.spec}
# Entries of ``strategy_options`` that are the search's budget rather than the strategy's own options.
BUDGET_OPTIONS = tuple(setting.field for setting in SETTINGS if setting.budget)


def from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line's flags set, by setting; ``--out`` is the parser's own (settings.py)."""
    return {s.name: s.flag.given(args) for s in SETTINGS if s.flag is not None}
