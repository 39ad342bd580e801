"""Measured results from earlier tuning, as one table. They come from Kernel Tuner JSON
caches (plain or gzipped) and mpitune HDF5 files. They replay a search without a device, feed an
import, and give a prior that a search starts from (model/prior.py).

Kernel Tuner writes its cache incrementally and never closes it when a run dies. So a file may
end in a dangling ``},``, which is repaired. Kernel Tuner's error markers become mpitune statuses,
in either of its layouts. Older releases put them in place of the time. Release 1.5.0 uses
``__error__``, without a time. Its ``time`` is the mean of ``times``. It is kept as it is, not made
the median mpitune measures. So a replay here ranks configurations as Kernel Tuner did. Its
durations are in ms. Here they are in s, as everywhere in mpitune except kernel times (ms).

An entry may hold numbers besides the parameters and Kernel Tuner's own bookkeeping. They are its
metrics such as GFLOP/s, and its observers' power or energy. They become observed values, as do an mpitune
file's observed values and metrics. So a replay can optimise them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpitune.errors import UserError, environment_number, not_a_file
from mpitune.model.replay_clock import RecordedRun, recorded_run, twice_measured
from mpitune.model.result import Status
from mpitune.model.schema import KT_RESULT_KEYS, KT_STATUS_KEY, MAX_NAME, RESERVED, outside_int64, unkept_text
from mpitune.store.files import read_within

# Keys of a Kernel Tuner cache entry that are neither parameters nor observed values.
KT_BOOKKEEPING = (*KT_RESULT_KEYS, KT_STATUS_KEY)
KT_DURATIONS = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time")
KT_ERRORS = {
    "InvalidConfig": Status.INVALID,
    "CompilationFailedConfig": Status.COMPILE_ERROR,
    "RuntimeFailedConfig": Status.RUNTIME_ERROR,
}
_JSON_NUMBERS = frozenset({int, float, bool})  # what json.loads makes of a number


@dataclass
class Measurement:
    status: Status
    time_ms: float = math.nan
    times_ms: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    observed: dict[str, float] = field(default_factory=dict)
    # As the run raced it: the timed launches it got (``times_ms`` holds them), whether racing
    # stopped it, and whether its first launch survived a chunk's first pass, so that it was
    # measured twice (scheduling/rank.py); a Kernel Tuner cache's entries got every launch.
    launches: int = 0
    raced: bool = False
    twice: bool = False


@dataclass(frozen=True)
class Searched:
    """An mpitune file's valid configurations and how its last run ended (``runs.status``). A
    status of ``running`` means killed. So a plan from a run stopped short can say it holds part of it."""

    space_size: int
    status: str


@dataclass
class MeasuredData:
    source: str
    kernel_name: str
    device_name: str
    problem_size: list[Any]
    tune_params: dict[str, list[Any]]
    configs: list[tuple[Any, ...]]  # parameter values, in tune_params order
    measurements: list[Measurement]
    observed_names: list[str] = field(default_factory=list)
    recorded: RecordedRun = field(default_factory=RecordedRun)  # what the replay's clock charges besides
    # The launches the run made of configurations timed again, by (rank, purpose, config), in
    # the order they were made: calibration's references, confirmation's candidates.
    retimed: dict[tuple[int, str, tuple[Any, ...]], list[float]] = field(default_factory=dict)
    searched: Searched | None = None  # None: a Kernel Tuner cache, which records neither

    def lookup(self) -> dict[tuple[Any, ...], Measurement]:
        return dict(zip(self.configs, self.measurements))

    def prior_time_ms(self) -> list[float]:
        """Each configuration's time as a prior takes it: NaN where it did not pass."""
        return [m.time_ms if m.status == Status.OK else math.nan for m in self.measurements]


def file_sha256(path: str) -> str:
    """The digest of a file's bytes, by which a resumed run knows its prior unchanged."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


def load(path: str) -> MeasuredData:
    if not os.path.isfile(path):
        raise UserError(f"{path}: {not_a_file(path) or 'no such file'}")
    if path.endswith((".h5", ".hdf5")):
        return _from_mpitune(path)
    return _from_kernel_tuner(path)


_CAP = "MPITUNE_KT_JSON_MAX_MB"
_SHARED: dict[tuple[str, int, int, int], MeasuredData] = {}  # the file last loaded, by its name and stat


def load_shared(path: str) -> MeasuredData:
    """``load(path)`` once per process while the file is unchanged, one object no caller may
    change. A replay's rank 0 reads it twice, and ``plan`` once per simulated rank (256: minutes)."""
    if not os.path.isfile(path):
        return load(path)  # which says why
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = load(path)
    return _SHARED[key]


def read_kt_json(path: str) -> dict[str, Any]:
    """Parse a Kernel Tuner cache, repairing a file its writer never closed. What it may
    expand to is bounded: 256 MiB (MPITUNE_KT_JSON_MAX_MB). That is 16 times the largest cache known,
    which docs/strategies.md names. A gzip of 1.5 MB can hold 1.5 GB."""
    try:
        text = read_within(path, environment_number(_CAP, 256), _CAP).decode("utf-8")
        document: dict[str, Any] = json.loads(text)
        return document
    except RecursionError:
        raise UserError(f"{path}: not a Kernel Tuner cache (nested too deeply)") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a Kernel Tuner cache (not UTF-8 text)") from None
    except json.JSONDecodeError:
        stripped = text.rstrip()
        if stripped.endswith(","):
            try:
                repaired: dict[str, Any] = json.loads(stripped[:-1] + "}}")
                return repaired
            except json.JSONDecodeError:
                pass
        raise UserError(f"{path}: not a Kernel Tuner cache (invalid JSON)") from None


def _kt_observed(entry: dict[str, Any], skipped: frozenset[str]) -> dict[str, float]:  # skipped: params, bookkeeping
    return {k: float(v) for k, v in entry.items() if k not in skipped and _number(v)}


def _kt_measurement(entry: dict[str, Any]) -> Measurement:
    ms_to_s = 1e-3
    m = Measurement(
        status=Status.OK,
        compile_s=float(entry.get("compile_time", 0) or 0) * ms_to_s,
        verify_s=float(entry.get("verification_time", 0) or 0) * ms_to_s,
        benchmark_s=float(entry.get("benchmark_time", 0) or 0) * ms_to_s,
    )
    value = entry.get("time")
    if "__error__" in entry:
        # Kernel Tuner 1.5.0 writes its marker here and no time; other text is an error message.
        error = str(entry["__error__"])
        m.status, m.error = KT_ERRORS.get(error, Status.RUNTIME_ERROR), error
    elif isinstance(value, str):
        m.status, m.error = KT_ERRORS.get(value, Status.RUNTIME_ERROR), value
    elif value is None or not math.isfinite(float(value)):
        m.status, m.error = Status.RUNTIME_ERROR, f"time is {value!r}"
    else:
        m.time_ms = float(value)
        m.times_ms = list(map(float, entry.get("times", [])))
        m.launches = len(m.times_ms)
    return m


def _from_kernel_tuner(path: str) -> MeasuredData:
    return from_kt_document(path, read_kt_json(path))


def from_kt_document(path: str, doc: dict[str, Any]) -> MeasuredData:
    """A Kernel Tuner cache already parsed (they are large: parse once, use twice)."""
    if not isinstance(doc, dict) or "tune_params" not in doc or "cache" not in doc:
        raise UserError(f"{path}: not a Kernel Tuner cache (no tune_params or cache)")
    tune_params = _checked_params(path, doc)
    names = list(tune_params)
    if not isinstance(doc["cache"], dict):
        raise UserError(f"{path}: cache: must be an object of entries, not {type(doc['cache']).__name__}")
    configs, measurements, observed = [], [], {}
    seen: dict[tuple[Any, ...], str] = {}
    kinds = [_kind(values[0]) for values in tune_params.values()]  # each float or str (_checked_params)
    positions = tuple(tuple(i for i, kind in enumerate(kinds) if kind is want) for want in (float, str))
    skipped = frozenset([*names, *KT_BOOKKEEPING])
    for key, entry in doc["cache"].items():
        config = _checked_entry(path, key, entry, tune_params, positions)
        if config in seen:
            raise UserError(f"{path}: entry {key!r}: the same configuration as entry {seen[config]!r}")
        seen[config] = key
        configs.append(config)
        measurements.append(_kt_measurement(entry))
        measurements[-1].observed = _kt_observed(entry, skipped)
        observed.update(dict.fromkeys(measurements[-1].observed))
    if not configs:
        raise UserError(f"{path}: the cache holds no configurations")
    for k, (name, values) in enumerate(tune_params.items()):  # values entries have that the header lacks
        extra = {config[k] for config in configs} - set(values)
        tune_params[name] = list(values) + sorted(extra, key=str)
    size = doc.get("problem_size", [])
    return MeasuredData(
        source=path,
        kernel_name=str(doc.get("kernel_name", "")),
        device_name=str(doc.get("device_name", "")),
        problem_size=size if isinstance(size, list) else [size],
        tune_params=tune_params,
        configs=configs,
        measurements=measurements,
        observed_names=list(observed),
    )


def _checked_params(path: str, doc: dict[str, Any]) -> dict[str, list[Any]]:
    """The header's parameters, held to the rules a spec's ``tune_params`` are. They must be
    identifiers that no result column shadows. Each is a list of finite numbers or of strings, without
    repeats. So the file an import writes works with every verb. The first breach is one line."""
    params = doc["tune_params"]
    if not isinstance(params, dict) or not params:
        raise UserError(f"{path}: tune_params: must be an object of parameter name -> list of values")
    names = doc.get("tune_params_keys") or list(params)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or sorted(names) != sorted(params):
        raise UserError(f"{path}: tune_params_keys: must list the names of tune_params")
    result = {}
    for name in names:
        where = f"{path}: tune_params: parameter {name[:40]!r}{'...' if len(name) > 40 else ''}"
        if not name.isidentifier() or len(name) > MAX_NAME:
            raise UserError(f"{where}: a name must be an identifier of at most {MAX_NAME} characters")
        if name in RESERVED:
            raise UserError(f"{where}: the name is reserved for a result field")
        values = params[name]
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: must be a non-empty list of values, not {type(values).__name__} {values!r}")
        for value in values:
            unkept = outside_int64(value) or unkept_text(value)
            if unkept:
                raise UserError(f"{where}: {unkept}")
            if _kind(value) is None:
                raise UserError(f"{where}: value {value!r}: values must be finite numbers or strings")
        if len({_kind(v) for v in values}) > 1:
            raise UserError(f"{where}: mixes strings and numbers")
        if len(set(values)) != len(values):
            raise UserError(f"{where}: lists the value {next(v for v in values if values.count(v) > 1)!r} twice")
        result[name] = values
    return result


_TIMES = ("time", *KT_DURATIONS)
_PLAIN = frozenset({int, float, type(None)})  # what a time or duration may be, told at C speed
_Kinds = tuple[tuple[int, ...], ...]  # the positions of a configuration's numbers and of its text


def _checked_entry(path: str, key: str, entry: Any, params: dict[str, list[Any]], kinds: _Kinds) -> tuple[Any, ...]:
    """One cache entry's configuration, once its values and numbers are of the kinds they
    must be (``kinds``). JSON's own numbers are told at C speed (``_finite``)."""
    if not isinstance(entry, dict):
        raise UserError(f"{path}: entry {str(key)[:60]!r}: must be an object, not {type(entry).__name__}")
    config = tuple([entry.get(name) for name in params])  # None: of no kind
    if not _of_kinds(config, kinds):
        _refuse_entry(path, key, entry, params)
    if not set(map(type, map(entry.get, _TIMES))) <= _PLAIN:  # else each is looked at, to say which
        for name in _TIMES:
            value = entry.get(name)
            # A time may be Kernel Tuner's error marker (text); NaN and inf are failed times.
            if not (value is None or (name == "time" and isinstance(value, str)) or _number(value)):
                raise UserError(f"{path}: entry {str(key)[:60]!r}: {name} is {value!r}, not a number")
    times = entry.get("times", [])
    if not isinstance(times, list) or not _finite(times):
        raise UserError(f"{path}: entry {str(key)[:60]!r}: times must be a list of finite numbers")
    return config


def _refuse_entry(path: str, key: str, entry: dict[str, Any], tune_params: dict[str, list[Any]]) -> None:
    """Raise the error of the first parameter ``entry`` lacks, or holds a value of the wrong kind of."""
    where = f"{path}: entry {str(key)[:60]!r}"
    for name, values in tune_params.items():
        if name not in entry:
            raise UserError(f"{where}: has no value for parameter {name!r}")
        value = entry[name]
        if _kind(value) is None or _kind(value) != _kind(values[0]):
            raise UserError(f"{where}: parameter {name!r} is {value!r}, not a value of the kind {values[:3]!r} are")
    raise AssertionError("an entry refused for no parameter")


def _of_kinds(config: tuple[Any, ...], kinds: _Kinds) -> bool:
    """Whether each value is of its kind (``_kind``: float or str), as ``kinds`` places them."""
    numbers, texts = kinds
    return _finite([config[i] for i in numbers]) and all(isinstance(config[i], str) for i in texts)


def _finite(values: list[Any]) -> bool:
    """Whether every value is a finite number (``_kind`` float), at C speed for JSON's numbers."""
    if set(map(type, values)) <= _JSON_NUMBERS:
        return all(map(math.isfinite, values))
    return all(_kind(v) is float for v in values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> type | None:
    """``float`` for a finite number, ``str`` for text, else None. Bools are numbers, as in a spec."""
    if isinstance(value, str):
        return str
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float
    return None


def _status(path: str, value: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise UserError(f"{path}: unknown status {value!r}; `python -m mpitune check {path}` says more") from None


def _from_mpitune(path: str) -> MeasuredData:
    from mpitune.store.reader import read  # h5py, which a replay of a Kernel Tuner cache does without

    data = read(path)
    twice = twice_measured(data.timeline)
    names = data.param_names
    problem = data.problem
    configs, measurements = [], []
    seen = set()
    observed_names = data.observed_names + data.metric_names
    values = np.hstack([data.observed, data.metrics])
    row_configs = [tuple(row[n].item() if hasattr(row[n], "item") else row[n] for n in names) for row in data.results]
    for row, row_values, config in zip(data.results, values, row_configs):
        if config in seen:
            continue
        seen.add(config)
        times = [float(t) for t in row["times_ms"] if not math.isnan(t)]
        configs.append(config)
        measurements.append(
            Measurement(
                status=_status(path, str(row["status"])),
                time_ms=float(row["time_ms"]),
                times_ms=times,
                compile_s=float(row["compile_s"]),
                verify_s=float(row["verify_s"]),
                benchmark_s=float(row["benchmark_s"]),
                error=str(row["error"]),
                observed=dict(zip(observed_names, map(float, row_values))),
                launches=int(row["launches"]),
                raced=bool(row["raced"]),
                twice=int(row["config_id"]) in twice,
            )
        )
    if not configs:
        raise UserError(f"{path}: the file holds no configurations")
    config_of = dict(zip(data.results["config_id"].tolist(), row_configs))
    devices = problem.devices or ("",)
    return MeasuredData(
        source=path,
        kernel_name=problem.kernel_name,
        device_name=devices[0],
        problem_size=list(problem.problem_size),
        tune_params={n: list(problem.tune_params[n]) for n in names},
        configs=configs,
        measurements=measurements,
        observed_names=observed_names,
        recorded=recorded_run(
            data.timeline,
            data.retimed,
            bool(len(data.results) and data.results["raced"].any()),
            dict(zip(reversed(row_configs), reversed(data.results["rank"].tolist()))),  # the first row's
            frozenset(config_of[i] for i in data.confirmed["config_id"].tolist() if i in config_of),
            data.schedule_of(int(data.runs["run"].max())) if len(data.runs) else "",
        ),
        retimed=_retimed(data.retimed, config_of),
        searched=Searched(int(data.runs["space_size"][-1]), str(data.runs["status"][-1])) if len(data.runs) else None,
    )


def _retimed(
    rows: np.ndarray, config_of: dict[int, tuple[Any, ...]]
) -> dict[tuple[int, str, tuple[Any, ...]], list[float]]:
    """The retimed launches by (rank, purpose, configuration), in the order the run made them."""
    out: dict[tuple[int, str, tuple[Any, ...]], list[float]] = {}
    for row in np.sort(rows, order=["run", "batch", "rank", "round"]):
        config = config_of.get(int(row["config_id"]))
        if config is not None:
            out.setdefault((int(row["rank"]), str(row["purpose"]), config), []).append(float(row["time_ms"]))
    return out
