"""The run settings as data: one row each, ``SETTINGS`` all of them.

Everything about a setting is read from its row. That is its flag, its environment variable,
its spec name and default, and docs/spec.md's tables. settings.py merges the command line, the
environment and the spec by it. A new setting is a row here, its field in ``RunSettings``
(model/problem.py) and the code that uses it. Each row is also a constant. So ``Overrides`` is
read by row, and typed: ``overrides[PRIOR]``.

Light to import: the command line reads it before any verb. Every rank reads it before MPI
starts. setting_checks.py says how.
"""

from __future__ import annotations

import argparse
from typing import Any

from mpitune.errors import number_flag
from mpitune.spec import setting_checks as checks
from mpitune.spec.setting_rows import Flag, Setting, Variable

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

STRATEGY = Setting[str | None](
    "strategy",
    flag=Flag("--strategy", "search strategy, one of those below (default: as the spec says, see docs/spec.md)"),
    meaning="a search strategy (see docs/strategies.md; Kernel Tuner's `diff_evo` is `differential_evolution`)",
    shown_default='`"portfolio"` with a budget (`max_fevals` or `time_limit`), else `"brute_force"`',
)

STRATEGY_OPTIONS = Setting[dict[str, Any] | None](
    "strategy_options",
    meaning="dict: `max_fevals`, `time_limit` (s), `seed`, and the strategy's own options (mpitune's names, "
    "e.g. `population`, not Kernel Tuner's `popsize`)",
    shown_default="`{}`",
)

MAX_FEVALS = Setting[int | None](
    "max_fevals",
    spec=False,
    budget=True,
    flag=Flag("--max-fevals", "at most this many new configurations", type=int),
    check=checks.at_least(1),
)

TIME_LIMIT = Setting[float | None](
    "time_limit_s",
    field="time_limit",
    spec=False,
    budget=True,
    flag=Flag("--time-limit", "stop handing out batches after S {seconds}", type=number_flag(), metavar="S"),
    check=checks.optional(checks.positive_seconds),
)

SEED = Setting[int | None](
    "seed",
    budget=True,
    flag=Flag("--seed", "seed of the strategy's random numbers", type=int),
    check=checks.at_least(0),
    meaning="seeds the strategy, as Kernel Tuner's `seed`; `strategy_options`' `seed` takes precedence",
    shown_default="`0`",
)

BATCH_SIZE = Setting[int | None](
    "batch_size",
    spec=False,
    flag=Flag(
        "--batch-size",
        "configurations per hand-out over all ranks (default: docs/performance.md, 'Chunks and batches')",
        type=int,
    ),
    check=checks.at_least(1),
)

SCHEDULE = Setting[str](
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
)

COMPILE_WORKERS = Setting[int | None](
    "compile_workers",
    flag=Flag(
        "--compile-workers",
        "processes per rank compiling ahead while the device measures "
        "(default: the rank's cores minus one; 0: compile each configuration in turn)",
        type=int,
        metavar="N",
    ),
    check=checks.at_least(0),
    meaning="processes per rank compiling configurations ahead while the device measures; `0`: compile each in turn",
    shown_default='the rank\'s cores minus one, at least 1; `0` with `lang = "C"`',
)

RACING = Setting[bool | str](
    "racing",
    True,
    check=checks.racing,
    fills=("racing", "race_rule"),
    meaning=_RACING,
    shown_default="`True`",
)

CONFIRM = Setting[bool | int](
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
)

CALIBRATE = Setting[bool](
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
)

DEVICE_MARGIN = Setting[float](
    "device_margin",
    0.02,
    check=checks.fraction_margin,
    meaning="how far (a fraction) a rank's device factor may be from the median rank's, beyond its noise, "
    "before calibration and confirmation flag it",
    shown_default="`0.02`",
)

CACHE_PATH = Setting[str | None](
    "cache_path",
    field="cache",
    check=checks.cache,
    meaning="path of the HDF5 results file, relative to the current directory, in a directory that exists; a "
    "file already there must be HDF5; `--out PATH` overrides",
    shown_default="the spec's name with `.h5`, in the current directory",
)

PRIOR = Setting[tuple[str, ...] | None](
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
)

PRIOR_ANY_KERNEL = Setting[bool](
    "prior_any_kernel",
    False,
    flag=Flag(
        "--prior-any-kernel",
        "take a prior whose kernel name differs from this run's (default: refuse it)",
        switch=True,
    ),
    meaning="`True`: take a prior whose kernel name differs from `kernel_name` (a renamed kernel); `False`: refuse it",
    shown_default="`False`",
)

STOP_FILE = Setting[str](
    "stop_file",
    "",
    spec=False,
    flag=Flag(
        "--stop-file",
        "stop as on SIGTERM once PATH exists (job scripts touch it when Slurm signals)",
        metavar="PATH",
    ),
    check=checks.text,
)

ISOLATE = Setting[bool](
    "isolate",
    True,
    spec=False,
    flag=Flag(
        "--no-isolation",
        "measure in the rank's own process: no per-configuration deadline, a crash ends the job",
        negates=True,
    ),
)

RANK_DEADLINE_FLOOR = Setting[float | None](
    "rank_deadline_floor_s",
    field="rank_deadline_floor",
    spec=False,
    flag=Flag(
        "--rank-deadline-floor",
        "wait at least S seconds for a rank's batch before calling the rank silent and ending the run "
        "(default 45, or ${variable}; see docs/reliability.md)",
        type=number_flag(),
        metavar="S",
    ),
    variable=Variable("MPITUNE_RANK_DEADLINE_FLOOR_S"),
    check=checks.optional(checks.positive_seconds),
)

# Read on every rank before MPI starts, for the heartbeats (cli/running.py): no field of RunSettings.
LIVENESS_TIMEOUT = Setting[float | None](
    "liveness_timeout_s",
    field="liveness_timeout",
    spec=False,
    flag=Flag(
        "--liveness-timeout",
        "end the run when a rank has sent no heartbeat for S seconds, however long its batch "
        "(default 20, or ${variable}; 0: no heartbeats; see docs/reliability.md)",
        type=number_flag(zero_ok=True),
        metavar="S",
    ),
    variable=Variable("MPITUNE_LIVENESS_TIMEOUT_S", zero_ok=True),
)

ALLOW_MIXED_DEVICES = Setting[bool](
    "allow_mixed_devices",
    False,
    spec=False,
    flag=Flag(
        "--allow-mixed-devices",
        "run even when the ranks have different device models (their timings differ)",
        switch=True,
    ),
    check=checks.switch,
)

DEVICES = Setting[str](
    "devices",
    "one",
    flag=Flag(
        "--devices",
        "one: one device model a job (default: the spec's devices, else one); each: the ranks grouped "
        "by device model, each model its own search and file, the models sharing results "
        "(docs/running.md, 'Several device models in one job')",
        choices=checks.device_choices,
    ),
    check=checks.devices,
    meaning='`"one"`: one device model a job, ranks of another refused (unless `--allow-mixed-devices`); '
    '`"each"`: the ranks grouped by device model (the name the file records), each model tuned apart into its own file '
    "(`STEM.<model>.h5`), with its own search, calibration and confirmation, the models told each other's "
    'results as a prior while they run (docs/running.md, "Several device models in one job")',
    shown_default='`"one"`',
)

PORTABLE = Setting[int](
    "portable",
    0,
    flag=Flag(
        "--portable",
        "with --devices each: once every model's search has ended, measure the N best portable candidates "
        "on every model that lacks them and time them again with its confirmation (default: the spec's "
        "portable, else 0: none; docs/running.md, 'Several device models in one job')",
        type=int,
        metavar="N",
    ),
    check=checks.portable_count,
    meaning='with `devices = "each"`: once every model\'s search has ended, the N configurations with the '
    "smallest worst ratio to a model's best (measured on every model first), and each model's own best, are "
    "measured on each model that lacks them and timed again with its confirmation, so that `report` compares "
    'them on every model (docs/running.md, "Several device models in one job"); `0`: none (at most 16)',
    shown_default="`0`",
)

SETTINGS: tuple[Setting[Any], ...] = (
    STRATEGY,
    STRATEGY_OPTIONS,
    MAX_FEVALS,
    TIME_LIMIT,
    SEED,
    BATCH_SIZE,
    SCHEDULE,
    COMPILE_WORKERS,
    RACING,
    CONFIRM,
    CALIBRATE,
    DEVICE_MARGIN,
    CACHE_PATH,
    PRIOR,
    PRIOR_ANY_KERNEL,
    STOP_FILE,
    ISOLATE,
    RANK_DEADLINE_FLOOR,
    LIVENESS_TIMEOUT,
    ALLOW_MIXED_DEVICES,
    DEVICES,
    PORTABLE,
)
BY_NAME = {setting.name: setting for setting in SETTINGS}
# The spec's names of the settings, with their defaults: Kernel Tuner's tune_kernel keywords.
SPEC_DEFAULTS = {setting.field: setting.default for setting in SETTINGS if setting.spec}
# Entries of ``strategy_options`` that are the search's budget, not the strategy's own options.
BUDGET_OPTIONS = tuple(setting.field for setting in SETTINGS if setting.budget)


def from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line's flags set, by setting. ``--out`` is the parser's own (settings.py)."""
    return {s.name: s.flag.given(args) for s in SETTINGS if s.flag is not None}
