"""Kernel Tuner's results file (format 1.0, ``kernel_tuner.integration``), read and written here.

It holds the best configurations of a kernel per device and problem size. ``store_results`` writes
them and ``create_device_targets`` reads them. Nothing in the file is run.

A file holds the kernel's name (and source), its tunable parameters, the objective and its
direction. Its ``data`` has one entry per configuration kept. Each entry has ``device_name``,
``problem_size``, ``tunable_parameters`` and the objective's value. ``device_name`` is the device's
name, with every run of characters other than letters and digits made one ``_``.
``problem_size`` is its sizes joined by ``x``.

What Kernel Tuner's format cannot say, mpitune keeps in optional keys of an entry. Kernel Tuner's
reader passes over them. Its ``store_results`` keeps them when it adds other devices' entries.

- ``mpitune_source``: the file the entry's measurements came from.
- ``mpitune_confirmed``: true when the value is a confirmation's, not the search's. That is the
  median of every rank's launches of the winner (docs/analysis.md, "Confirmation").
- ``mpitune_ci_ms``: ``[lo, hi]``, the value's 95 % interval in ms. It is the confirmation's
  bootstrap interval, or the order-statistic interval of the median of the search's launches.
- ``mpitune_tied``: the configurations the confirmation could not tell from this winner.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpitune.errors import UserError
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import read_within

VERSION = "1.0"
SOURCE_KEY = "mpitune_source"
CONFIRMED_KEY = "mpitune_confirmed"
INTERVAL_KEY = "mpitune_ci_ms"
TIED_KEY = "mpitune_tied"
_ENTRY_KEYS = ("device_name", "problem_size", "tunable_parameters")
_OURS = (SOURCE_KEY, CONFIRMED_KEY, INTERVAL_KEY, TIED_KEY)
_HEAD_KEYS = (
    "version_number",
    "kernel_name",
    "kernel_string",
    "objective",
    "objective_higher_is_better",
    "tunable_parameters",
    "data",
)
READ_CAP_MB = 64  # a results file holds the few best configurations per device: kilobytes


class ResultsFileError(UserError, ValueError):
    """A results file that cannot be read or added to.

    The message is one line naming the file and what is wrong. It is a ``ValueError``, as Kernel
    Tuner raises. It is a ``UserError`` too, which the command line prints as one line with exit
    code 2."""


@dataclass(frozen=True)
class Entry:
    """One configuration kept for one device and problem size, with its objective value."""

    device_name: str
    problem_size: str
    params: Mapping[str, Any]
    value: float
    source: str = ""
    confirmed: bool = False
    interval_ms: tuple[float, float] | None = None
    tied: tuple[Mapping[str, Any], ...] = ()
    other: Mapping[str, Any] = field(default_factory=dict)  # keys neither tool defines, kept as read

    @property
    def block(self) -> tuple[str, str]:
        return (self.device_name, self.problem_size)


@dataclass(frozen=True)
class ResultsFile:
    """A whole results file; ``other`` keeps top-level keys neither tool defines."""

    kernel_name: str
    tunable_parameters: tuple[str, ...]
    objective: str
    higher_is_better: bool
    entries: tuple[Entry, ...]
    kernel_string: str = ""
    other: Mapping[str, Any] = field(default_factory=dict)

    def blocks(self) -> dict[tuple[str, str], list[Entry]]:
        """The entries by (device, problem size), in the order the file first names each."""
        out: dict[tuple[str, str], list[Entry]] = {}
        for entry in self.entries:
            out.setdefault(entry.block, []).append(entry)
        return out

    def devices(self) -> list[str]:
        return list(dict.fromkeys(e.device_name for e in self.entries))


def device_label(name: str) -> str:
    """A device's name as the format keeps it (Kernel Tuner's ``store_results``)."""
    return re.sub("[^0-9a-zA-Z]+", "_", name.strip())


def size_label(problem_size: Any) -> str:
    """A problem size as the format keeps it: its sizes joined by ``x``."""
    if isinstance(problem_size, str):
        return problem_size
    sizes = problem_size if isinstance(problem_size, (list, tuple)) else (problem_size,)
    return "x".join(str(s) for s in sizes)


def read_results_file(path: str) -> ResultsFile:
    """The results file at ``path`` (Kernel Tuner's or mpitune's), or a ``ResultsFileError``."""
    text = read_within(path, READ_CAP_MB, "the results file").decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); not a results file") from None
    return _parsed(doc, path)


def _parsed(doc: Any, path: str) -> ResultsFile:
    """A results file from its parsed JSON, checked as Kernel Tuner checks it and then some.

    Each entry's value must be a number, since Kernel Tuner compares them. mpitune's keys must be as
    written."""
    if not isinstance(doc, dict) or "version_number" not in doc:
        raise ResultsFileError(f"{path}: not a Kernel Tuner results file (no version_number)")
    if doc["version_number"] != VERSION:
        raise ResultsFileError(f"{path}: results file version {doc['version_number']!r}; only {VERSION!r} is known")
    for key, kind in (("kernel_name", str), ("objective", str), ("tunable_parameters", list), ("data", list)):
        if not isinstance(doc.get(key), kind):
            raise ResultsFileError(f"{path}: {key}: missing, or not a {kind.__name__}")
    names = doc["tunable_parameters"]
    if not all(isinstance(n, str) for n in names):
        raise ResultsFileError(f"{path}: tunable_parameters: not a list of names")
    higher = doc.get("objective_higher_is_better", False)
    if not isinstance(higher, bool):
        raise ResultsFileError(f"{path}: objective_higher_is_better: {higher!r} is not true or false")
    kernel_string = doc.get("kernel_string", "")
    entries = tuple(_entry(e, i, names, doc["objective"], path) for i, e in enumerate(doc["data"]))
    return ResultsFile(
        kernel_name=doc["kernel_name"],
        tunable_parameters=tuple(names),
        objective=doc["objective"],
        higher_is_better=higher,
        entries=entries,
        kernel_string=kernel_string if isinstance(kernel_string, str) else "",
        other={k: v for k, v in doc.items() if k not in _HEAD_KEYS},
    )


def _entry(raw: Any, index: int, names: Sequence[str], objective: str, path: str) -> Entry:
    where = f"{path}: data[{index}]"
    if not isinstance(raw, dict):
        raise ResultsFileError(f"{where}: not an object")
    missing = [k for k in (*_ENTRY_KEYS, objective) if k not in raw]
    if missing:
        raise ResultsFileError(f"{where}: lacks {', '.join(missing)}")
    if not isinstance(raw["device_name"], str) or not isinstance(raw["problem_size"], str):
        raise ResultsFileError(f"{where}: device_name and problem_size must be text")
    params = raw["tunable_parameters"]
    if not isinstance(params, dict) or any(n not in params for n in names):
        raise ResultsFileError(f"{where}: tunable_parameters lacks some of {', '.join(names)}")
    value = raw[objective]
    if not is_number(value):
        raise ResultsFileError(f"{where}: {objective} is {value!r}, not a number")
    return Entry(
        device_name=raw["device_name"],
        problem_size=raw["problem_size"],
        params={n: params[n] for n in names},
        value=float(value),
        source=_checked(raw, SOURCE_KEY, str, where, ""),
        confirmed=_checked(raw, CONFIRMED_KEY, bool, where, False),
        interval_ms=_interval(raw.get(INTERVAL_KEY), where),
        tied=_tied(raw.get(TIED_KEY, []), names, where),
        other={k: v for k, v in raw.items() if k not in (*_ENTRY_KEYS, objective, *_OURS)},
    )


def is_number(value: Any) -> bool:
    """A finite real number, as JSON holds one (a bool is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked(raw: dict[str, Any], key: str, kind: type, where: str, default: Any) -> Any:
    value = raw.get(key, default)
    if not isinstance(value, kind):
        raise ResultsFileError(f"{where}: {key}: {value!r} is not a {kind.__name__}")
    return value


def _interval(value: Any, where: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(is_number(v) for v in value)):
        raise ResultsFileError(f"{where}: {INTERVAL_KEY}: {value!r} is not [lo, hi]")
    return (float(value[0]), float(value[1]))


def _tied(value: Any, names: Sequence[str], where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(t, dict) and all(n in t for n in names) for t in value):
        raise ResultsFileError(f"{where}: {TIED_KEY}: not a list of configurations")
    return tuple({n: t[n] for n in names} for t in value)


def document(results: ResultsFile) -> dict[str, Any]:
    """The file's JSON: Kernel Tuner's keys, then mpitune's where an entry has them."""
    doc: dict[str, Any] = {
        "version_number": VERSION,
        "kernel_name": results.kernel_name,
        "objective": results.objective,
        "objective_higher_is_better": results.higher_is_better,
        "tunable_parameters": list(results.tunable_parameters),
    }
    if results.kernel_string:
        doc["kernel_string"] = results.kernel_string
    doc.update(results.other)
    doc["data"] = [_written(e, results.objective) for e in results.entries]
    return doc


def _written(entry: Entry, objective: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "device_name": entry.device_name,
        "problem_size": entry.problem_size,
        "tunable_parameters": dict(entry.params),
        objective: entry.value,
    }
    if entry.source:
        out[SOURCE_KEY] = entry.source
    if entry.confirmed:
        out[CONFIRMED_KEY] = True
    if entry.interval_ms is not None:
        out[INTERVAL_KEY] = list(entry.interval_ms)
    if entry.tied:
        out[TIED_KEY] = [dict(t) for t in entry.tied]
    out.update(entry.other)
    return out


def write(path: str, results: ResultsFile) -> None:
    """The file at ``path``, whole or not at all."""
    with atomic_text(path) as fh:
        json.dump(document(results), fh, indent=1)
        fh.write("\n")
