"""Which configurations a tuning run's block of a results file keeps, and which one the file names.

``kept_entries`` and ``confirmed_entry`` say what a block keeps. The file names one configuration
for a device and problem size, and one for a device. It names a default for a device it does not
know.

For a device and a problem size the file holds, it is that block's best entry. For a device
alone, it is Kernel Tuner's rule: the configuration kept for most of the device's problem sizes.
Among those, it is the one with the best sum of values. These are ``kernel_tuner.integration``'s
rules (1.5.0), so both tools name the same configuration from one file. Where a block holds a
confirmation, mpitune writes its winner alone with the confirmed value. So the rules name the
confirmed winner.

The default is for a header compiled for no device of the file (``default_choice``). It is the
configuration that does least badly everywhere. The candidates are those kept for every
(device, problem size) block. Of them, it is the one whose worst ratio to a block's best value is
smallest. The ratio is time over the best time; for a higher-is-better objective, the best over
the value.
Where no configuration is kept for every block, it is the first device's choice. The rule itself,
over plain maps of a configuration's value per block, is model/portable.py's ``portable``. benchmarks/portable.py
applies it to whole caches of several GPU models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mpitune.model.judging.candidates import search_interval_ms
from mpitune.model.portable import portable
from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.offline.integration.results_file import (
    Entry,
    ResultsFile,
    ResultsFileError,
    device_label,
    is_number,
    size_label,
)


def config_key(params: Mapping[str, Any], names: Sequence[str]) -> str:
    """One configuration's identity: its values in the parameters' order (2 and 2.0 apart)."""
    return json.dumps([params[n] for n in names])


def best_entry(entries: Sequence[Entry], higher_is_better: bool) -> Entry:
    """The entry with the best value; the first of equals."""
    pick = max if higher_is_better else min
    return pick(entries, key=lambda e: e.value)


def common_best(entries: Sequence[Entry], names: Sequence[str], higher_is_better: bool) -> Entry:
    """Kernel Tuner's choice across problem sizes, as its first entry.

    Of the configurations with the most entries, it is the one with the best sum of values."""
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    first: dict[str, Entry] = {}
    for entry in entries:
        key = config_key(entry.params, names)
        counts[key] = counts.get(key, 0) + 1
        totals[key] = totals.get(key, 0.0) + entry.value
        first.setdefault(key, entry)
    most = max(counts.values())
    frequent = [k for k in counts if counts[k] == most]
    pick = max if higher_is_better else min
    return first[pick(frequent, key=lambda k: totals[k])]


def device_choice(results: ResultsFile, device: str) -> Entry:
    """The configuration for ``device`` (one of the file's), across its problem sizes."""
    mine = [e for e in results.entries if e.device_name == device]
    return common_best(mine, results.tunable_parameters, results.higher_is_better)


def best_config(results: ResultsFile, gpu_name: str = "default", problem_size: Any = None) -> dict[str, Any]:
    """``get_best_config``'s rule.

    For a device and problem size the file holds, it is the block's best. Else it is the device's
    choice across its problem sizes. Else it is the choice across every entry."""
    # Kernel Tuner's reading of the name, and the name as its store_results keeps it, which takes
    # env["device_name"] as it is ("AMD EPYC (replayed)" is kept as AMD_EPYC_replayed_).
    names_read = {gpu_name.replace("-", "_").replace(" ", "_"), device_label(gpu_name)}
    mine = [e for e in results.entries if e.device_name in names_read]
    names, higher = results.tunable_parameters, results.higher_is_better
    if mine and problem_size:
        block = [e for e in mine if e.problem_size == size_label(problem_size)]
        if block:
            return dict(best_entry(block, higher).params)
    return dict(common_best(mine or list(results.entries), names, higher).params)


@dataclass(frozen=True)
class DefaultChoice:
    """The default configuration and why.

    ``worst_ratio`` is its largest ratio to a block's best. It is None when no configuration is in
    every block, so the default is the first device's choice."""

    params: dict[str, Any]
    worst_ratio: float | None
    common: int  # configurations kept for every block
    blocks: int


def default_choice(results: ResultsFile) -> DefaultChoice:
    """The configuration that is, at worst, closest to each block's best (module docstring)."""
    names, higher = results.tunable_parameters, results.higher_is_better
    blocks = results.blocks()
    params: dict[str, Mapping[str, Any]] = {}
    for entry in results.entries:  # each block's keys in the file's order: ties go to the first in it
        params.setdefault(config_key(entry.params, names), entry.params)
    values: dict[tuple[str, str], dict[str, float]] = {}
    for block, entries in blocks.items():
        mine: dict[str, float] = {}
        for entry in entries:  # a configuration kept twice in a block counts with its better value
            key = config_key(entry.params, names)
            mine[key] = _better(mine.get(key, entry.value), entry.value, higher)
        values[block] = {k: mine[k] for k in params if k in mine}
    found = portable(values, higher)
    if found is None:
        first = device_choice(results, results.devices()[0])
        return DefaultChoice(dict(first.params), None, 0, len(blocks))
    return DefaultChoice(dict(params[found.key]), found.worst_ratio, found.common, len(blocks))


def _better(a: float, b: float, higher_is_better: bool) -> float:
    return max(a, b) if higher_is_better else min(a, b)


def _params(result: Mapping[str, Any], names: tuple[str, ...], where: str) -> dict[str, Any]:
    missing = [n for n in names if n not in result]
    if missing:
        raise ResultsFileError(f"store_results: {where} lacks the tunable parameter(s) {', '.join(missing)}")
    return {n: plain(result[n]) for n in names}


def kept_entries(
    results: Sequence[Mapping[str, Any]],
    names: tuple[str, ...],
    objective: str,
    higher: bool,
    top: float,
    block: tuple[str, str],
    source: str,
) -> tuple[Entry, ...]:
    """Kernel Tuner's rule: every passing configuration within ``top`` % of the best, best first."""
    passed = [
        (i, r)
        for i, r in enumerate(results)
        if is_number(plain(r.get(objective))) and str(r.get("status", Status.OK)) == Status.OK and "__error__" not in r
    ]
    if not passed:
        raise ResultsFileError(f"store_results: no configuration in results has a number as its {objective!r}")
    values = [float(plain(r[objective])) for _, r in passed]
    best = max(values) if higher else min(values)
    margin = abs(best) * top / 100
    kept = [(v, i, r) for v, (i, r) in zip(values, passed) if (best - v if higher else v - best) <= margin]
    kept.sort(key=lambda k: -k[0] if higher else k[0])
    return tuple(
        Entry(*block, _params(r, names, f"results[{i}]"), v, source, interval_ms=_interval(r, objective))
        for v, i, r in kept
    )


def _interval(result: Mapping[str, Any], objective: str) -> tuple[float, float] | None:
    """The median's interval from mpitune's launches (Kernel Tuner's time is their mean)."""
    times = result.get("times")
    if objective != "time" or "status" not in result or not isinstance(times, (list, tuple)) or not times:
        return None
    lo, hi = search_interval_ms([float(t) for t in times if is_number(plain(t))])
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def confirmed_entry(
    env: Mapping[str, Any], names: tuple[str, ...], objective: str, higher: bool, block: tuple[str, str], source: str
) -> tuple[Entry, ...]:
    """The confirmation's winner alone (mpitune's env), or nothing where there is none."""
    found = env.get("confirmation")
    if objective != "time" or higher or not isinstance(found, Mapping):
        return ()
    winner, tied = found.get("winner"), found.get("tied")
    ci: Any = found.get("ci_ms")
    value: Any = found.get("winner_ms")
    if not isinstance(winner, Mapping) or not is_number(value) or not isinstance(tied, list):
        return ()
    good = isinstance(ci, (list, tuple)) and len(ci) == 2 and all(is_number(v) for v in ci)
    interval = (float(ci[0]), float(ci[1])) if good else None
    return (
        Entry(
            *block,
            _params(winner, names, "env's confirmed winner"),
            float(value),
            source,
            confirmed=True,
            interval_ms=interval,
            tied=tuple(_params(t, names, "a configuration env's confirmation ties") for t in tied),
        ),
    )
