"""Checking and repairing a cache file after a crash, and telling a crash from damage.

A run killed at any moment leaves a file that h5py opens: SWMR writes are ordered for that. But
it may hold three things. One is the rows of a batch whose writing was cut short. They were
resized in but never filled, so their status or phase is empty. Another is a run whose row still says
"running". The last is the batch that was in flight. ``repair`` fixes the first two in place.
``findings`` reports everything. That includes what no repair can fix: a configuration recorded
twice, unknown statuses.

Damage (flipped or missing bytes) is another matter. ``examine`` reads the whole file back from
an in-memory copy, repaired there as a resume would repair it. So a damaged file is found before
anything writes to it. No verb but ``check --salvage`` changes a damaged file.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from mpitune.errors import UserError
from mpitune.model.result import Status
from mpitune.model.schema import SCHEMA_VERSION
from mpitune.model.timeline import RECORDED_PHASES
from mpitune.store.files import as_known, refuse_inputs, refuse_unwritable, refused_write
from mpitune.store.layout import Layout, LayoutVersion, layout_version
from mpitune.store.lock import h5_file, writer_alive
from mpitune.store.soundness import image, read_back
from mpitune.store.superblock import clear_write_flags, is_hdf5

log = logging.getLogger(__name__)

# Tables whose rows a cut-short write (a full disk) may leave as zeros at the end, and the text
# column every written row fills.
_FILLED = {"results": "status", "timeline": "phase", "retimed": "purpose", "device_factors": "source"}


def repair(f: h5py.File) -> list[str]:
    """Fix what a killed writer left, in a file open for writing (not yet in SWMR mode)."""
    if any(name not in f for name in ("results", "timeline", "runs")):
        return []  # not an mpitune cache: findings says so
    done = []
    for name, column in _FILLED.items():
        ds = f.get(name)
        if ds is None or not len(ds):  # a file before the table existed
            continue
        filled = np.flatnonzero(ds.fields(column)[...] != b"")
        keep = int(filled[-1]) + 1 if len(filled) else 0
        if keep < len(ds):
            done.append(f"dropped {len(ds) - keep} half-written row(s) at the end of {name}")
            ds.resize((keep,))
    rows = len(f["results"])
    for name in ("metrics", "observed"):  # one row per results row; NaN where cut short
        if name in f and len(f[name]) != rows:
            done.append(f"{name} had {len(f[name])} row(s) for {rows} result(s): aligned")
            f[name].resize((rows, f[name].shape[1]))
    runs = f["runs"]
    for i in range(len(runs)):
        row = runs[i]
        if row["status"] == b"running":
            timeline = f["timeline"][...]
            ends = timeline["end_s"][timeline["run"] == row["run"]]
            row["status"], row["wall_s"] = b"killed", float(ends.max()) if len(ends) else 0.0
            row["measured"] = int((f["results"].fields("run")[...] == row["run"]).sum())
            runs[i] = row
            done.append(
                f"run {int(row['run'])} was killed: marked as such, with {int(row['measured'])} "
                f"configuration(s) recorded"
            )
    return done


def in_flight(f: h5py.File) -> str:
    """Which configurations each rank held when the last run was killed, '' if none.

    It is per batch, since on several ranks two batches are in flight at once (scheduling/manager.py)."""
    if "in_flight" not in f or not len(f["in_flight"]):
        return ""
    rows = f["in_flight"][...]
    recorded = set(f["results"].fields("config_id")[...].tolist())
    lines = []
    for run, batch in sorted({(int(r), int(b)) for r, b in zip(rows["run"], rows["batch"])}):
        mine = rows[(rows["run"] == run) & (rows["batch"] == batch)]
        held = []
        for rank in np.unique(mine["rank"]):
            ids = [int(i) for i in mine["config_id"][mine["rank"] == rank] if int(i) not in recorded]
            if ids:
                held.append(f"rank {int(rank)} held {', '.join(map(str, ids))}")
        if held:
            lines.append(f"batch {batch} of run {run} was in flight: " + "; ".join(held))
    return "; ".join(lines)


def findings(f: h5py.File) -> list[str]:
    """What is wrong with a file and cannot be repaired; empty when it is sound."""
    problems = []
    for name in ("results", "timeline", "runs", "ranks"):
        if name not in f:
            problems.append(f"dataset {name} is missing")
    for name in ("problem", "param_names", "objective"):  # objective: absent in files older than metrics
        try:
            if name != "objective" or name in f.attrs:
                json.loads(f.attrs[name])
        except (KeyError, ValueError, TypeError):
            problems.append(f"attribute {name} is missing or not JSON")
    if problems:
        return problems
    missing = set(json.loads(f.attrs["param_names"])) - set(f["results"].dtype.names or ())
    if missing:
        return [f"results lack the parameters {', '.join(sorted(missing))}"]
    results, timeline, runs = f["results"][...], f["timeline"][...], f["runs"][...]
    ids, counts = np.unique(results["config_id"], return_counts=True)
    twice = ids[counts > 1]
    if len(twice):
        problems.append(f"{len(twice)} configuration(s) recorded more than once: {', '.join(map(str, twice[:10]))}")
    unknown = sorted({s.decode(errors="replace") for s in np.unique(results["status"])} - set(Status))
    if unknown:
        problems.append(f"unknown statuses: {', '.join(map(repr, unknown))}")
    for name in ("metrics", "observed"):
        if name in f and len(f[name]) != len(results):
            problems.append(f"{name} has {len(f[name])} row(s) for {len(results)} result(s)")
    if len(results) and results["run"].max() >= len(runs):
        problems.append("results refer to runs that have no row in runs")
    phases = sorted({p.decode(errors="replace") for p in np.unique(timeline["phase"])} - set(RECORDED_PHASES))
    if phases:
        problems.append(f"unknown timeline phases: {', '.join(map(repr, phases))}")
    if len(timeline) and (timeline["end_s"] < timeline["start_s"]).any():
        problems.append("timeline rows that end before they start")
    return problems


class DamagedFileError(UserError):
    """A cache file that cannot be read back whole or is inconsistent: refused, never changed."""


@dataclass
class Inspection:
    rows: int = 0
    repaired: list[str] = field(default_factory=list)  # what a crash left
    fixed: bool = False  # whether ``repaired`` was done to the file, or only found
    lost: str = ""
    problems: list[str] = field(default_factory=list)  # damage: nothing was changed
    # The file's layout; one newer than this mpitune's is neither judged nor repaired.
    version: LayoutVersion = field(default_factory=lambda: LayoutVersion(Layout.CURRENT, SCHEMA_VERSION))


def examine(path: str) -> Inspection:
    """Everything about a file no run is writing.

    It is found on an in-memory copy, repaired as a resume would repair it. The file itself is not
    changed. Reads every dataset in full."""
    found = Inspection()
    try:
        f = image(path, writable=True)
    except (OSError, ValueError, RuntimeError) as exc:
        found.problems.append(f"not a readable HDF5 file ({exc})")
        return found
    with f:
        found.problems = read_back(f)
        if found.problems:
            return found
        found.version = layout_version(f)
        if found.version.layout is Layout.NEWER:
            return found  # its rules are a later version's: this one can say nothing of them
        try:
            found.lost = in_flight(f)
            found.repaired = repair(f)
            found.problems = [found.version.damage] if found.version.damage else []
            found.problems += findings(f)
            found.rows = len(f["results"]) if "results" in f else 0
        except Exception as exc:
            found.problems.append(f"inconsistent data ({type(exc).__name__}: {exc})")
    return found


def verify(path: str) -> None:
    """Refuse a damaged file with one line (DamagedFileError), changing nothing.

    A resume verifies its file twice. It does so before start-up, so that a damaged file is refused
    before any rank starts work. It does so again once it holds the writer lock. Reading the whole
    file back costs time in proportion to its size. So a file this process found sound is not read
    again while it is the same file. That is the same device and inode, size and modification time."""
    state = _state(path)
    if state in _SOUND:
        return
    found = examine(path)
    found.version.refuse_newer(path)
    if found.problems:
        more = f" and {len(found.problems) - 1} more" if len(found.problems) > 1 else ""
        raise DamagedFileError(
            f"{path} is damaged: {found.problems[0]}{more}; it was not changed "
            f"(python -m mpitune check {path} --salvage keeps what is readable)"
        )
    _SOUND.add(state)


# Files this process verified sound, by what identifies them and their contents' last change.
_SOUND: set[tuple[int, int, int, int]] = set()


def _state(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def inspect(path: str, fix: bool = True) -> Inspection:
    """Check a cache file no run is writing.

    Repair in place what a crash left, unless told not to, and only if the file is not damaged."""
    if writer_alive(path):
        raise UserError(f"{path}: a run is writing it now; check it when the run has ended")
    found = examine(path)
    if found.problems or not fix or found.version.layout is Layout.NEWER:
        return found  # ``repaired`` says what a repair would do; nothing was changed
    found.repaired, found.fixed = [], True
    if clear_write_flags(path):
        found.repaired.append("cleared the open-for-write mark a killed writer left")
    with h5_file(path, "a", libver="latest") as f:
        found.repaired += repair(f)
    return found


def refuse_unusable(path: str, *inputs: str) -> None:
    """Refuse a results path that cannot serve, before any rank starts.

    That is a path that can never become a cache, or a damaged one. It is also one of the run's
    ``inputs`` under any name: its spec, the measured data a replay answers from. Found at start-up
    instead, it would cost every rank's start-up and end the job with an error. And a damaged file
    opened for writing may hang the writer in HDF5 or be changed by it. Reads the whole file once
    (``verify``), changing nothing. A path the system will not let this run write raises its
    ``OSError`` (files.py, ``refused_write``). That is a read-only path, or one without permission."""
    refuse_inputs(path, *inputs)
    try:
        usable = not os.path.exists(path) or (os.path.isfile(path) and is_hdf5(path))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    if not usable:
        raise UserError(f"{path} exists and is not an HDF5 file; pass --cache NEW.h5 or remove it")
    refuse_unwritable(path)
    if os.path.exists(path):
        verify(path)


def open_for_writing(path: str) -> h5py.File:
    """Open a cache for writing, clearing the open-for-write mark a killed writer left."""
    try:
        return h5_file(path, "a", libver="latest")
    except OSError as exc:
        if refused_write(exc):
            raise as_known(exc, path) from None
        if "h5clear" not in str(exc) or not clear_write_flags(path):
            raise UserError(f"cannot open cache {path}: {exc}") from None
    log.warning("%s: the run that wrote it last was killed; its results are kept", path)
    return h5_file(path, "a", libver="latest")
