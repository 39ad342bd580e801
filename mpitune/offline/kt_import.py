"""A Kernel Tuner JSON cache as a new mpitune HDF5 file.

The cache may be plain, gzipped, or never closed by a killed run. The file is written through
``mpitune.store.cache.Cache`` exactly as a run writes it, with ``runs.strategy = "import"``.

Kernel Tuner measures one configuration after another on one device, so the file gets one rank.
Its timeline is rebuilt from what each entry records. The configuration's compile, verify and
benchmark time end at its timestamp, with Kernel Tuner's strategy time before them. The rest of
a gap between two configurations is ``other``. Entries without timestamps are laid end to end.
Each session (see SESSION_GAP_S) becomes a run. Kernel Tuner's metrics and observers' values
(GFLOP/s, power, ...) become observed values (see mpitune/store/measured/kernel_tuner.py).

Units: Kernel Tuner's durations are in ms, mpitune's in s; kernel times are ms in both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

from mpitune import __version__
from mpitune.errors import UserError
from mpitune.model.identity import ProblemIdentity
from mpitune.model.result import Result, Scored, Status
from mpitune.model.schema import KT_STATUS_KEY
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import PhaseRow
from mpitune.store.cache import Cache, RunInfo
from mpitune.store.files import refuse_inputs
from mpitune.store.measured import MeasuredData, from_kt_document, read_kt_json

# A Kernel Tuner cache filled over several sessions shows a gap in its timestamps; a gap
# longer than this starts a new run in the imported file.
SESSION_GAP_S = 1800.0
HOST = "unknown host"  # Kernel Tuner does not record it
APPEND_ROWS = 2048  # results written to the file at once


@dataclass(frozen=True)
class Imported:
    """What an import wrote, for the command's line."""

    configs: int
    runs: int
    space_size: int
    kernel: str
    device: str


@dataclass(frozen=True)
class CacheEntry:
    """One configuration of the cache as the file records it: its result and config.

    It also holds when it finished (unix seconds) and after how long. That is its durations, and
    Kernel Tuner's strategy time before it."""

    result: Result
    config: dict[str, Any]
    finished_unix: float
    duration_s: float
    strategy_s: float


def import_kt(kt_path: str, out: str, command: str = "") -> Imported:
    """Write a Kernel Tuner cache into a new mpitune file."""
    if kt_path.endswith((".h5", ".hdf5")):
        raise UserError(f"{kt_path}: already an mpitune file; import takes a Kernel Tuner JSON cache")
    refuse_inputs(out, kt_path)
    if os.path.exists(out):
        raise UserError(f"{out} exists; import writes a new file (remove it or pick another name)")
    doc = read_kt_json(kt_path)
    measured = from_kt_document(kt_path, doc)
    space = SearchSpace.from_configs(measured.tune_params, measured.configs)
    entries = _entries(kt_path, list(doc["cache"].values()), measured, space)
    device = measured.device_name or "unknown device"
    iterations = max([1] + [len(m.times_ms) for m in measured.measurements])
    cache = Cache(out, _identity(kt_path, measured, iterations, device), measured.tune_params, iterations)
    try:
        sessions = _sessions([e.finished_unix for e in entries], [e.duration_s for e in entries])
        info = RunInfo(
            started_unix=math.nan,
            ranks=1,
            strategy="import",
            seed=-1,
            max_fevals=None,
            time_limit_s=None,
            batch_size=1,
            space_size=len(space),
            command=command or f"python -m mpitune import {kt_path} --out {out}",
            version=__version__,
        )
        for session in sessions:
            _write_run(cache, info, [entries[i] for i in session], device)
    finally:
        cache.close()
    return Imported(len(measured.configs), len(sessions), len(space), measured.kernel_name, device)


def _identity(kt_path: str, measured: MeasuredData, iterations: int, device: str) -> ProblemIdentity:
    """The problem as far as Kernel Tuner records it: no source, language or launch settings."""
    return ProblemIdentity(
        kernel_name=measured.kernel_name,
        kernel_source="",
        lang="",
        problem_size=tuple(measured.problem_size),
        arguments=(),
        tune_params={k: tuple(v) for k, v in measured.tune_params.items()},
        restrictions=(),
        iterations=iterations,
        observed_names=tuple(measured.observed_names),
        devices=(device,),
        imported_from=os.path.basename(kt_path),
    )


def _entries(kt_path: str, raw: list[dict[str, Any]], measured: MeasuredData, space: SearchSpace) -> list[CacheEntry]:
    """Every configuration with its id in ``space``.

    Each has mpitune's status where an export from mpitune kept it. Kernel Tuner's markers lump
    failures together."""
    position = [{v: i for i, v in enumerate(values)} for values in measured.tune_params.values()]
    ids = {tuple(int(i) for i in row): cid for cid, row in enumerate(space.indices)}
    names = list(measured.tune_params)
    ms = 1e-3
    durations = [m.compile_s + m.verify_s + m.benchmark_s for m in measured.measurements]
    strategy = [float(e.get("strategy_time", 0) or 0) * ms for e in raw]
    finished = [_unix(e.get("timestamp")) for e in raw]
    if any(math.isnan(f) for f in finished):  # no timestamps: one after another, ending at the file's time
        clock, finished = 0.0, []
        for d, st, e in zip(durations, strategy, raw):
            clock += st + d + float(e.get("framework_time", 0) or 0) * ms
            finished.append(clock)
        base = os.path.getmtime(kt_path) - clock
        finished = [base + f for f in finished]
    entries = []
    for m, config, e, end, duration, before in zip(
        measured.measurements, measured.configs, raw, finished, durations, strategy
    ):
        status = Status(e[KT_STATUS_KEY]) if m.status != Status.OK and e.get(KT_STATUS_KEY) in set(Status) else m.status
        cid = ids[tuple(p[v] for p, v in zip(position, config))]
        recorded = {
            k: v for k, v in asdict(m).items() if k not in ("launches", "twice")
        }  # the replay's, not a result's
        result = Result(config_id=cid, rank=0, **{**recorded, "status": status, "times_ms": tuple(m.times_ms)})
        entries.append(CacheEntry(result, dict(zip(names, config)), end, duration, before))
    return entries


def _write_run(cache: Cache, info: RunInfo, entries: Sequence[CacheEntry], device: str) -> None:
    """One session as one run, on its own clock. The clock starts with the first entry's strategy time."""
    t0 = min(e.finished_unix - e.duration_s - e.strategy_s for e in entries)
    cache.start_run(replace(info, started_unix=t0), [HOST], [device], [0])
    scored: list[Scored] = []
    phases: list[tuple[int, PhaseRow]] = []
    last = 0.0
    for batch, e in enumerate(entries):
        end = e.finished_unix - t0
        start = max(last, end - e.duration_s)
        phases += _phases(e, batch, last, start, end)
        last = max(end, last)
        result = replace(e.result, batch=batch, started_s=start, finished_s=end)
        scored.append(cache.objective.evaluate(result, e.config))
        if len(scored) == APPEND_ROWS:
            cache.append(scored, phases)
            scored, phases = [], []
    cache.append(scored, phases)
    cache.finish_run(last, "finished", len(entries))


def _phases(e: CacheEntry, batch: int, last: float, start: float, end: float) -> list[tuple[int, PhaseRow]]:
    """The rank's phases from the end of the previous entry (``last``) to this one's ``end``.

    First comes whatever filled the gap, then Kernel Tuner's strategy time, then the recorded
    durations. They are squeezed into the time the timestamps leave for them (from ``start``)."""
    phases = []
    strategy_start = max(last, start - e.strategy_s)
    if strategy_start > last:
        phases.append((0, PhaseRow(batch, -1, "other", last, strategy_start)))
    if start > strategy_start:
        phases.append((0, PhaseRow(batch, -1, "strategy", strategy_start, start)))
    r = e.result
    scale = (end - start) / e.duration_s if e.duration_s > 0 else 0.0
    t = start
    for phase, seconds in (("compile", r.compile_s), ("verify", r.verify_s), ("benchmark", r.benchmark_s)):
        if seconds > 0:
            phases.append((0, PhaseRow(batch, r.config_id, phase, t, t + seconds * scale)))
            t += seconds * scale
    return phases


def _unix(stamp: Any) -> float:
    try:
        moment = datetime.fromisoformat(str(stamp))
    except ValueError:
        return math.nan
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _sessions(finished_unix: list[float], durations: list[float]) -> list[list[int]]:
    """Indices of the configurations in measuring order, cut where the timestamps jump."""
    order = sorted(range(len(finished_unix)), key=lambda i: finished_unix[i])
    sessions: list[list[int]] = []
    current: list[int] = []
    last = math.nan
    for i in order:
        start = finished_unix[i] - durations[i]
        if current and start - last > SESSION_GAP_S:
            sessions.append(current)
            current = []
        current.append(i)
        last = finished_unix[i]
    if current:
        sessions.append(current)
    return sessions
