"""Kernel Tuner's JSON caches (plain or gzipped), read into measured data and checked.

Kernel Tuner writes its cache incrementally and never closes it when a run dies. So a file may
end in a dangling ``},``, which is repaired. Kernel Tuner's error markers become mpitune statuses,
in either of its layouts. Older releases put them in place of the time. Release 1.5.0 uses
``__error__``, without a time. Its ``time`` is the mean of ``times``. It is kept as it is, not made
the median mpitune measures. So a replay here ranks configurations as Kernel Tuner did. Its
durations are in ms. Here they are in s, as everywhere in mpitune except kernel times (ms).

An entry may hold numbers besides the parameters and Kernel Tuner's own bookkeeping. They are its
metrics such as GFLOP/s, and its observers' power or energy. They become observed values.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mpitune.errors import UserError, environment_number
from mpitune.model.result import Status
from mpitune.model.schema import KT_RESULT_KEYS, KT_STATUS_KEY, MAX_NAME, RESERVED, outside_int64, unkept_text
from mpitune.store.files import read_within
from mpitune.store.measured.table import MeasuredData, Measurement

# Keys of a Kernel Tuner cache entry that are neither parameters nor observed values.
KT_BOOKKEEPING = (*KT_RESULT_KEYS, KT_STATUS_KEY)
KT_DURATIONS = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time")
KT_ERRORS = {
    "InvalidConfig": Status.INVALID,
    "CompilationFailedConfig": Status.COMPILE_ERROR,
    "RuntimeFailedConfig": Status.RUNTIME_ERROR,
}
_JSON_NUMBERS = frozenset({int, float, bool})  # what json.loads makes of a number
_CAP = "MPITUNE_KT_JSON_MAX_MB"  # the most MB a cache may expand to


def read_kt_json(path: str) -> dict[str, Any]:
    """Parse a Kernel Tuner cache, repairing a file its writer never closed.

    What it may expand to is bounded: 256 MiB (MPITUNE_KT_JSON_MAX_MB). That is 16 times the
    largest cache known, which docs/strategies.md names. A gzip of 1.5 MB can hold 1.5 GB.
    """
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


def _kt_observed(entry: dict[str, Any], skipped: frozenset[str]) -> dict[str, float]:
    """The entry's numbers but those ``skipped``: its parameters and Kernel Tuner's bookkeeping."""
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
    """The header's parameters, held to the rules a spec's ``tune_params`` are.

    They must be identifiers that no result column shadows. Each is a list of finite numbers or
    of strings, without repeats. So the file an import writes works with every verb. The first
    breach is one line.
    """
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
    """One cache entry's configuration, once its values and numbers are of the kinds they must be.

    ``kinds`` places them. JSON's own numbers are told at C speed (``_finite``).
    """
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
