"""mpitune files as Kernel Tuner's results file, and as the header of device targets.

The commands are ``export --format kt-results FILE.h5 ... --out results.json`` and ``--format
header ... --out kernel.h``, with one file per device and problem size.

Each file gives the block of its device and problem size. Where it holds a confirmation's
verdict (objective time), that is the confirmed winner alone. It comes with the confirmed median,
its interval and the configurations tied with it. Otherwise the block is what Kernel Tuner's
``store_results`` keeps. That is every passing configuration within 3 % of the best, each with the
interval of its median. The files must be of one kernel, with the same tunable parameters and
objective. They must name each (device, problem size) once. Anything else is refused in one line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from mpitune.errors import UserError
from mpitune.offline import confirmation
from mpitune.offline.exchange import as_written, config_of
from mpitune.offline.integration import results_file as rf
from mpitune.offline.integration.choice import confirmed_entry, kept_entries
from mpitune.offline.integration.header import header_text
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import refuse_inputs
from mpitune.store.reader import CacheData, read

TOP_PCT = 3.0  # Kernel Tuner's store_results keeps what is within 3 % of the best


def device_of(data: CacheData, path: str) -> str:
    """The one device model a file was measured on. A file of several is refused in one line."""
    devices = data.problem.devices or tuple(sorted({str(d) for d in data.ranks["device"]}))
    if len(devices) != 1:
        named = ", ".join(devices) if devices else "none"
        raise UserError(f"{path}: measured on {len(devices)} device models ({named}); a target is one device")
    return devices[0]


def _measured(data: CacheData, written: dict[str, dict[Any, Any]]) -> list[dict[str, Any]]:
    """Each configuration's first measurement as ``tune_kernel`` lists it.

    It holds its parameters (as its spec wrote them), status, objective value where it passed, and
    launches."""
    values = data.objective_values()[:, 0]
    seen: set[int] = set()
    out = []
    for row, value in zip(data.results, values):
        if int(row["config_id"]) in seen:
            continue
        seen.add(int(row["config_id"]))
        entry = config_of(row, written)
        entry["status"] = str(row["status"])
        if math.isfinite(value):
            entry[data.objective.name] = float(value)
        entry["times"] = [float(t) for t in np.asarray(row["times_ms"], dtype=float).ravel() if math.isfinite(t)]
        out.append(entry)
    return out


def _as_written_config(config: dict[str, Any], written: dict[str, dict[Any, Any]]) -> dict[str, Any]:
    return {n: written[n].get(v, v) for n, v in config.items()}


def block_of(path: str) -> rf.ResultsFile:
    """One mpitune file as a results file of one block (module docstring)."""
    data = read(path)
    if data.objective.several:
        raise UserError(f"{path}: tuned for {len(data.objective.names)} objectives; a results file ranks by one")
    names = tuple(data.param_names)
    objective, higher = data.objective.name, data.objective.higher_is_better
    block = (rf.device_label(device_of(data, path)), rf.size_label(list(data.problem.problem_size)))
    written = as_written(data)
    source = os.path.basename(path)
    verdict = confirmation.latest(data)[0]
    entries: tuple[rf.Entry, ...] = ()
    if verdict is not None:
        found = asdict(verdict)
        found["winner"] = _as_written_config(verdict.winner, written)
        found["tied"] = [_as_written_config(t, written) for t in verdict.tied]
        entries = confirmed_entry({"confirmation": found}, names, objective, higher, block, source)
    if not entries:
        try:
            entries = kept_entries(_measured(data, written), names, objective, higher, TOP_PCT, block, source)
        except rf.ResultsFileError:
            raise UserError(f"{path}: no configuration passed; nothing to choose from") from None
    return rf.ResultsFile(data.problem.kernel_name, names, objective, higher, entries, data.problem.kernel_source)


def results_of(paths: Sequence[str]) -> rf.ResultsFile:
    """The files' blocks as one results file, in the order given.

    Files that do not belong together are refused. The error names the first that differs from the
    first file."""
    first: rf.ResultsFile | None = None
    entries: list[rf.Entry] = []
    where: dict[tuple[str, str], str] = {}
    for path in paths:
        one = block_of(path)
        if first is None:
            first = one
        elif one.kernel_name != first.kernel_name:
            raise UserError(f"{path}: kernel {one.kernel_name!r}, not {first.kernel_name!r} of {paths[0]}")
        elif set(one.tunable_parameters) != set(first.tunable_parameters):
            raise UserError(
                f"{path}: tunable parameters {', '.join(one.tunable_parameters)}, not "
                f"{', '.join(first.tunable_parameters)} of {paths[0]}"
            )
        elif (one.objective, one.higher_is_better) != (first.objective, first.higher_is_better):
            raise UserError(f"{path}: objective {one.objective!r}, not {first.objective!r} of {paths[0]}")
        block = one.entries[0].block
        if block in where:
            raise UserError(
                f"{path}: {block[0]} at problem size {block[1]} again (also {where[block]}); give one file of each"
            )
        where[block] = path
        entries += one.entries
    if first is None:
        raise UserError("no files given")
    return rf.ResultsFile(
        first.kernel_name, first.tunable_parameters, first.objective, first.higher_is_better, tuple(entries),
        first.kernel_string,
    )  # fmt: skip


def export_kt_results(paths: Sequence[str], out: str) -> int:
    """``--format kt-results``: the results file of ``paths``; the entries written."""
    refuse_inputs(out, *paths)
    results = results_of(paths)
    rf.write(out, results)
    return len(results.entries)


def export_header(paths: Sequence[str], out: str) -> int:
    """``--format header``: the header of device targets of ``paths``; the targets written."""
    refuse_inputs(out, *paths)
    results = results_of(paths)
    text = header_text(results)
    with atomic_text(out) as fh:
        fh.write(text)
    return len(results.devices())
