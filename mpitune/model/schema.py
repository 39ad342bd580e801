"""The results schema, defined once.

Longer than 400 lines: every dataset's columns and meanings, in the one place all readers share.

These tables give the file's layout and the columns of the analysis tables. They give the names
a parameter may not take, and the values it may not hold.

Every text column is fixed-length UTF-8: HDF5's SWMR readers cannot follow variable-length data.
The width is in bytes, and longer text is cut.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The layout's version, in every file's attribute ``schema_version``: a change of layout must
# raise it. 2: results gained launches and raced, the file its asks (asked, searches); 3: the
# ranks' devices compared (retimed, confirmed, device_factors); 4: the priors each run started from
# (priors); 5: what was told before each ask (told); 6: how each run handed out its work
# (schedules). Older versions read.
SCHEMA_VERSION = 6
SHORT_TEXT = "S16"  # a status, a phase, a version
NAME_TEXT = "S96"  # a host, a device, a strategy
LONG_TEXT = "S1024"  # an error, a command line, a path
# The per-iteration times: one float64 per timed launch, NaN where a configuration ran fewer.
ITERATIONS = "iterations"


@dataclass(frozen=True)
class Column:
    """One field of a dataset.

    ``doc`` is its meaning as docs/cache-format.md shows it. A test holds each table there to
    these tables.
    """

    name: str
    dtype: str  # a numpy dtype string, or ITERATIONS
    doc: str


# One row per measured configuration: config_id, then one column per tunable parameter, then these.
RESULT_COLUMNS: tuple[Column, ...] = (
    Column(
        "status",
        SHORT_TEXT,
        "`ok`, `compile_error`, `launch_error`, `runtime_error`, `verify_failed`, `timeout` or `invalid`: "
        "the values of `mpitune.model.result.Status`",
    ),
    Column(
        "time_ms",
        "f8",
        "median of `times_ms`, ms (Kernel Tuner's `time`); in a file `import` wrote, Kernel Tuner's `time` "
        "as it was, the mean of `times_ms`; NaN unless `ok`",
    ),
    Column("times_ms", ITERATIONS, "every timed launch, ms; NaN where there was none"),
    Column("compile_s", "f8", "compiling it (or waiting for its compile worker) and loading it, s"),
    Column("verify_s", "f8", "its verified launch, also its warm-up, s"),
    Column("benchmark_s", "f8", "its timed launches, s"),
    Column("launches", "i4", "the timed launches it got: `iterations`, or fewer when raced"),
    Column("raced", "i1", "1 when racing stopped its timing early, as clearly slower than the best known"),
    Column(
        "throttled",
        NAME_TEXT,
        "why the GPU held its clocks down while it was first timed, so that it was timed again "
        "(`again: ...` when the second timing was throttled too); empty if not",
    ),
    Column("run", "i4", "the run that measured it: its row in `runs`"),
    Column("batch", "i8", "the hand-out of that run it came in"),
    Column("rank", "i4", "the rank that measured it"),
    Column("host", NAME_TEXT, "that rank's host"),
    Column("device", NAME_TEXT, "that rank's device model"),
    Column("started_s", "f8", "its start on the run's clock (seconds since the run started)"),
    Column("finished_s", "f8", "its end on the run's clock"),
    Column("error", LONG_TEXT, "the compiler's log (shortened), the crash or the mismatch; empty when `ok`"),
)
CONFIG_ID = Column(
    "config_id", "i8", "the configuration's row in the search space (Cartesian order, restrictions applied)"
)
# Kernel Tuner's cache (offline/exchange.py writes it, store/measured/kernel_tuner.py reads it)
# holds each configuration as one flat object: the parameters beside these keys, Kernel Tuner
# 1.5.0's own results (kernel_tuner/core.py) and the status an export adds. A parameter so named
# is lost there.
KT_RESULT_KEYS: tuple[str, ...] = (
    "time",
    "times",
    "compile_time",
    "verification_time",
    "benchmark_time",
    "strategy_time",
    "framework_time",
    "timestamp",
    "__error__",
)
KT_STATUS_KEY = "mpitune_status"
# Texts Kernel Tuner reads as a failed configuration under any key of an entry, parameters
# included (kernel_tuner/util.py, read_cache).
KT_ERROR_MARKERS: tuple[str, ...] = ("ErrorConfig", "InvalidConfig", "CompilationFailedConfig", "RuntimeFailedConfig")
# Names of result fields, in the file and in Kernel Tuner's cache: a tunable parameter or a metric
# may not shadow them.
RESERVED: tuple[str, ...] = (CONFIG_ID.name, *(c.name for c in RESULT_COLUMNS), *KT_RESULT_KEYS, KT_STATUS_KEY)
MAX_NAME = 64  # characters in a parameter's name: a column of the file, a name in restrictions
MAX_TEXT_BYTES = 1024  # a text value's UTF-8 bytes: one compiler argument each, printed in progress lines

TIMELINE_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("rank", "i4", "the rank"),
    Column("batch", "i8", "the hand-out it served; -1 before the first"),
    Column("config_id", "i8", "the configuration, or -1 for a phase not about one"),
    Column(
        "phase",
        SHORT_TEXT,
        "`spec` (loading the spec: its own code and the checks of what it defines), `startup`, `strategy`, "
        "`compile`, `verify`, `benchmark`, `calibrate` (timing the reference configuration with a chunk), "
        "`confirm` (timing the best candidates again once the search has ended; its batch is the one after "
        "the search's last), `write`, `lost` (a configuration whose worker hung or died), `restart` (starting "
        "a new worker), `other`, `wait`; and, beside these, `compile_ahead` (a compile by one of the rank's "
        "compile workers; `compile` is then the time the rank waited for it, plus loading), `worker_start` "
        "(its measuring worker's start), `strategy_beside` and `write_beside` (rank 0's strategy and writes "
        "while its own chunk was measured beside them), which are no part of the rank's wall time",
    ),
    Column("start_s", "f8", "its start, seconds since the run started (all ranks left a barrier together)"),
    Column("end_s", "f8", "its end, on the same clock"),
)
RUN_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run's number, from 0"),
    Column("started_unix", "f8", "its start, seconds since the epoch"),
    Column("wall_s", "f8", "its measured wall time, s; NaN while it runs or if it was killed"),
    Column("ranks", "i4", "its ranks"),
    Column("strategy", NAME_TEXT, "the search strategy"),
    Column("seed", "i8", "the strategy's seed"),
    Column("max_fevals", "i8", "the budget in configurations; -1 for none"),
    Column("time_limit_s", "f8", "the budget in seconds; NaN for none"),
    Column("batch_size", "i4", "configurations per hand-out round of all ranks"),
    Column("space_size", "i8", "valid configurations in the space"),
    Column("measured", "i8", "configurations this run measured"),
    Column(
        "status",
        SHORT_TEXT,
        "`running` (or killed), else why it stopped: `finished`, `max_fevals`, `time_limit`, `signal` "
        "(SIGTERM, SIGUSR1 or the stop file), `device_error` (a lost GPU), `spec_error` (a spec's "
        "per-configuration function failed), `silent_rank` (a rank stopped answering) or `file_lost` "
        "(the file was removed, replaced or truncated)",
    ),
    Column("command", LONG_TEXT, "the command line"),
    Column("version", SHORT_TEXT, "the mpitune version"),
)
IN_FLIGHT_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("batch", "i8", "the hand-out"),
    Column("rank", "i4", "the rank it was handed to"),
    Column("config_id", "i8", "a configuration handed out and not yet recorded"),
)
# The search's history, from which a resumed run rebuilds its strategy (nothing executable is stored):
# every ask in order, with the size asked for, and one row per run that ended cleanly.
ASKED_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("batch", "i8", "the hand-out this ask made"),
    Column("requested", "i8", "how many ids the strategy was asked for"),
    Column("config_id", "i8", "an id it answered, in its order"),
)
# Where an ask did not follow the batch rule (batch b asked once batch b - depth was told, from the
# run's rank count) but came whenever ranks wanted work, one row per ask: how many of the run's
# results rows (told in row order, one report at a time) the strategy knew when it was asked.
TOLD_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("batch", "i8", "the hand-out this ask made"),
    Column("rows", "i8", "how many of the run's `results` rows the strategy had been told when it was asked"),
)
# How each run handed out its work (scheduling/handouts.py, ``Policy``): a replay of the run hands it
# out the same way. A file without the table: batches, but where a run recorded told counts (only
# refilled runs did before every run recorded them).
SCHEDULE_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("schedule", SHORT_TEXT, "how it handed out its work: `refill` or `batches`"),
)
SEARCH_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column(
        "key",
        "S64",
        "SHA-256 (hex) of the strategy, seed, options and objective, as JSON, and of the priors' `sha256` "
        "where the run had priors",
    ),
    Column(
        "continuable",
        "i1",
        "1 if the next run with the same key continues this search; 0 if ids it handed out came back unmeasured",
    ),
)
# The priors a run started from (model/prior.py): measurements made elsewhere, read when the run
# started. A resumed run continues the recorded search only when its priors have the same digests.
PRIOR_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("path", LONG_TEXT, "the prior's file, absolute: an mpitune file or a Kernel Tuner cache"),
    Column("kernel_name", NAME_TEXT, "the kernel it measured"),
    Column("device", NAME_TEXT, "the device it was measured on, as it records it"),
    Column("problem_size", NAME_TEXT, "its problem size, as JSON"),
    Column(
        "shared",
        LONG_TEXT,
        "the tunable parameters it shares with this space, comma-separated: what configurations were matched on",
    ),
    Column("matched", "i8", "configurations of this space it gives a time"),
    Column("sha256", "S64", "SHA-256 (hex) of the file's bytes when the run read it; part of the search's `key`"),
)
# The Pareto front of a run with several objectives, as its latest run ended (model/judging/pareto.py
# computes it from the results, metrics and observed values; a reader computes the same from them
# at any time). Absent from files of one objective; files before it read as if computed.
FRONT_COLUMNS: tuple[Column, ...] = (
    Column("config_id", "i8", "a configuration on the front, in the order of `results`"),
)
# The ranks' devices compared (scheduling/devices/): during the search every rank times a
# reference configuration now and then (calibration), and once the search ends the best
# candidates are timed again, interleaved on every rank (confirmation). Every such launch is
# kept, apart from the search's rows, with the verdict on each candidate and each rank's device
# factor estimated from them.
RETIMED_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("batch", "i8", "the hand-out it came with: the calibration's, or the confirmation's own"),
    Column("rank", "i4", "the rank that timed it"),
    Column("config_id", "i8", "the configuration timed: the reference, or a candidate"),
    Column("round", "i4", "the round: a rank launches each of its configurations once per round"),
    Column(
        "time_ms",
        "f8",
        "the launch's time, ms; NaN when the configuration could not be launched there, was no longer "
        "launched there as clearly slower (after 3 rounds), or was not launched before a stop",
    ),
    Column(
        "purpose",
        SHORT_TEXT,
        "`calibrate` (the search's reference), `confirm` (a launch of the confirmation) or `unmade` "
        "(one a stop left owed, which the next run makes)",
    ),
)
CONFIRMED_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("config_id", "i8", "a candidate, in the order of their medians; its parameters are in its `results` row"),
    Column("median_ms", "f8", "median of its launches on every rank, each divided by its rank's factor, ms"),
    Column("ci_lo_ms", "f8", "lower end of the median's bootstrap confidence interval (95 %), ms"),
    Column("ci_hi_ms", "f8", "upper end, ms"),
    Column("launches", "i4", "its launches that were timed"),
    Column("winner", "i1", "1 for the winner, the lowest median"),
    Column("tied", "i1", "1 when statistically tied with the winner"),
    Column("started_s", "f8", "when the confirmation was handed out, on the run's clock, s"),
    Column("finished_s", "f8", "when its launches were recorded, s"),
)
DEVICE_FACTOR_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("batch", "i8", "the estimate holds from the hand-out after this one"),
    Column("rank", "i4", "the rank"),
    Column("factor", "f8", "the rank's times over the ranks' common time; their geometric mean is 1"),
    Column("sd", "f8", "the factor's bootstrap standard error"),
    Column(
        "flagged",
        "i1",
        "1 when it is further from the median rank's than `sd` times z plus the run's `device_margin` (2 % by "
        "default), z such that noise flags any of the ranks with 5 % chance (2.24 on 2 ranks, 3.73 on 256)",
    ),
    Column("source", SHORT_TEXT, "what it was estimated from: `calibrate` (the search's references) or `confirm`"),
)
RANK_COLUMNS: tuple[Column, ...] = (
    Column("run", "i4", "the run"),
    Column("rank", "i4", "the rank"),
    Column("host", NAME_TEXT, "its host"),
    Column("device", NAME_TEXT, "its device model"),
    Column("device_detail", NAME_TEXT, "which device exactly; for a GPU its index on the node, PCI bus id and UUID"),
    Column("pid", "i8", "its process id"),
)


# Every dataset of fixed columns, by its name in the file ("results" has the parameters besides).
TABLES: dict[str, tuple[Column, ...]] = {
    "timeline": TIMELINE_COLUMNS,
    "runs": RUN_COLUMNS,
    "ranks": RANK_COLUMNS,
    "in_flight": IN_FLIGHT_COLUMNS,
    "asked": ASKED_COLUMNS,
    "told": TOLD_COLUMNS,
    "schedules": SCHEDULE_COLUMNS,
    "searches": SEARCH_COLUMNS,
    "priors": PRIOR_COLUMNS,
    "front": FRONT_COLUMNS,
    "retimed": RETIMED_COLUMNS,
    "confirmed": CONFIRMED_COLUMNS,
    "device_factors": DEVICE_FACTOR_COLUMNS,
}
_TYPE_NAMES = {"i1": "int8", "i4": "int32", "i8": "int64", "f8": "float64", ITERATIONS: "float64[iterations]"}


def type_name(column: Column) -> str:
    """A column's type as docs/cache-format.md names it."""
    if column.dtype.startswith("S"):
        return f"text, {int(column.dtype[1:]):,} bytes"
    return _TYPE_NAMES[column.dtype]


def markdown_rows(columns: Sequence[Column]) -> list[str]:
    """The rows of a dataset's table in docs/cache-format.md: name, type and meaning."""
    return [f"| `{c.name}` | {type_name(c)} | {c.doc} |" for c in columns]


def outside_int64(value: Any) -> str | None:
    """Why a parameter value is an integer no int64 column keeps, or None.

    Such a value is refused before it is measured, since writing it would fail (``param_dtype``).
    A float column would not keep it faithfully either.
    """
    if not isinstance(value, int) or -(2**63) <= value < 2**63:
        return None
    shown = (
        str(value) if value.bit_length() <= 128 else f"{'-' if value < 0 else ''}2**{value.bit_length() - 1} or more"
    )
    return f"value {shown}, outside the 64-bit integers results are kept as"


def unkept_text(value: Any) -> str | None:
    """Why a text value would not reach the compiler, the file and Kernel Tuner's cache as written.

    None where it would. A NUL cannot be in a compiler's argument. A line break cuts a
    ``#define``. A value's bytes are bounded, as one argument of a command is. Kernel Tuner reads
    its error markers as a failure wherever an entry holds them.
    """
    if not isinstance(value, str):
        return None
    shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
    odd = next((c for c in value if unicodedata.category(c) in ("Cc", "Cs")), None)
    if odd is not None and unicodedata.category(odd) == "Cs":
        return f"value {shown}, which holds the unpaired surrogate {odd!r}, which UTF-8 cannot write"
    if odd is not None:
        return f"value {shown}, which holds the control character {odd!r}; text values hold none (NUL, line breaks)"
    size = len(value.encode())
    if size > MAX_TEXT_BYTES:
        return f"value {shown} of {size} bytes; text values are at most {MAX_TEXT_BYTES} bytes"
    if value in KT_ERROR_MARKERS:
        return f"value {value!r}, which Kernel Tuner's cache reads as a failed configuration"
    return None


def unkept_in_floats(values: Sequence[Any]) -> str | None:
    """Why a parameter mixing integers and floats loses one in its float column, or None.

    The column is ``param_dtype``'s. Two integers beyond 2**53 would read back as one value. Two
    configurations would become one.
    """
    if not any(isinstance(v, float) for v in values):
        return None
    lost = next((v for v in values if isinstance(v, int) and float(v) != v), None)
    if lost is None:
        return None
    return f"value {lost} among floats, an integer that their column of floats cannot hold exactly"


def comma_clash(params: Mapping[str, Sequence[Any]]) -> str | None:
    """Why two configurations could share a Kernel Tuner cache key, or None.

    The key is the values joined by commas. With commas in one parameter's values, the key still
    splits one way: the others' values have none. With two, ("a,b", "c") and ("a", "b,c") are
    both "a,b,c".
    """
    commas = []  # (parameter, its first value with a comma)
    for name, values in params.items():
        with_comma = [v for v in values if "," in str(v)]
        if with_comma:
            commas.append((name, with_comma[0]))
    if len(commas) < 2:
        return None
    (first, a), (second, b) = commas[:2]
    return (
        f"{first!r} and {second!r} both have values with a comma ({a!r}, {b!r}); Kernel Tuner keys a configuration "
        "by its values joined with commas, which then can name two configurations: keep commas to one parameter"
    )


def param_dtype(values: list[Any]) -> str:
    """A tunable parameter's column: text as wide as its longest value, else int64 or float64."""
    if isinstance(values[0], str):
        return f"S{max(len(v.encode()) for v in values)}"
    return "f8" if any(isinstance(v, float) for v in values) else "i8"


def dtype(columns: tuple[Column, ...], iterations: int = 1) -> np.dtype:
    """The compound dtype of a dataset; ``iterations`` sizes the per-iteration column."""
    return np.dtype([(c.name, "f8", (iterations,)) if c.dtype == ITERATIONS else (c.name, c.dtype) for c in columns])


def results_dtype(tune_params: dict[str, list[Any]], iterations: int) -> np.dtype[np.void]:
    """The results dataset's dtype: config_id, the tunable parameters, then ``RESULT_COLUMNS``."""
    params = tuple(Column(name, param_dtype(values), "tunable parameter") for name, values in tune_params.items())
    return dtype((CONFIG_ID, *params, *RESULT_COLUMNS), iterations)


TIMELINE_DTYPE = dtype(TIMELINE_COLUMNS)
RUNS_DTYPE = dtype(RUN_COLUMNS)
IN_FLIGHT_DTYPE = dtype(IN_FLIGHT_COLUMNS)
RANKS_DTYPE = dtype(RANK_COLUMNS)
ASKED_DTYPE = dtype(ASKED_COLUMNS)
TOLD_DTYPE = dtype(TOLD_COLUMNS)
SCHEDULE_DTYPE = dtype(SCHEDULE_COLUMNS)
SEARCH_DTYPE = dtype(SEARCH_COLUMNS)
PRIOR_DTYPE = dtype(PRIOR_COLUMNS)
FRONT_DTYPE = dtype(FRONT_COLUMNS)
RETIMED_DTYPE = dtype(RETIMED_COLUMNS)
CONFIRMED_DTYPE = dtype(CONFIRMED_COLUMNS)
DEVICE_FACTOR_DTYPE = dtype(DEVICE_FACTOR_COLUMNS)
