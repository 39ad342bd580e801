"""Writing how the ranks' devices compare into the file: every launch of a calibration or a
confirmation (``retimed``), the verdict on each confirmed candidate (``confirmed``) and each
rank's device factor (``device_factors``), as tables of their own beside the search's rows, which
they leave untouched: the search's medians stay what the search measured.

Rank 0 writes a confirmation whole, after the last report of it came in, and flushes; a run
killed before that leaves no part of it, and the next run confirms again.
"""

from __future__ import annotations

from collections.abc import Sequence

import h5py
import numpy as np

from mpitune.model.confirmation import DeviceFactor, Verdict
from mpitune.model.launches import Launch
from mpitune.model.schema import CONFIRMED_DTYPE, DEVICE_FACTOR_DTYPE, RETIMED_DTYPE, SHORT_TEXT
from mpitune.store.layout import append_rows, text

CALIBRATE, CONFIRM = "calibrate", "confirm"  # the purposes of retimed launches


def write_launches(f: h5py.File, run: int, batch: int, launches: Sequence[tuple[int, Launch]], purpose: str) -> None:
    """Append ``launches`` as (rank, launch) of one calibration or confirmation; not flushed."""
    rows = np.zeros(len(launches), RETIMED_DTYPE)
    tag = text(purpose, SHORT_TEXT)
    for i, (rank, launch) in enumerate(launches):
        rows[i] = (run, batch, rank, launch.config_id, launch.round, launch.time_ms, tag)
    append_rows(f["retimed"], rows)


def write_factors(f: h5py.File, run: int, batch: int, factors: Sequence[DeviceFactor], source: str) -> None:
    """Append one estimate of the ranks' device factors; not flushed."""
    rows = np.zeros(len(factors), DEVICE_FACTOR_DTYPE)
    tag = text(source, SHORT_TEXT)
    for i, d in enumerate(factors):
        rows[i] = (run, batch, d.rank, d.factor, d.sd, d.flagged, tag)
    append_rows(f["device_factors"], rows)


def write_confirmation(
    f: h5py.File,
    run: int,
    batch: int,
    launches: Sequence[tuple[int, Launch]],
    verdict: Verdict | None,
    started_s: float,
    finished_s: float,
) -> None:
    """Append one confirmation of ``run`` and flush: its launches, and without a verdict (no
    candidate could be launched, or a rank's launches are missing) nothing else."""
    write_launches(f, run, batch, launches, CONFIRM)
    if verdict is not None:
        tied = set(verdict.tied)
        confirmed = np.zeros(len(verdict.candidates), CONFIRMED_DTYPE)
        for i, c in enumerate(verdict.candidates):
            confirmed[i] = (
                run,
                c.config_id,
                c.median_ms,
                c.ci_ms[0],
                c.ci_ms[1],
                c.launches,
                c.config_id == verdict.winner,
                c.config_id in tied,
                started_s,
                finished_s,
            )
        append_rows(f["confirmed"], confirmed)
        write_factors(f, run, batch, verdict.factors, CONFIRM)
    f.flush()


def latest_candidates(f: h5py.File) -> frozenset[int]:
    """The candidates of the file's latest confirmation with a verdict; empty when it has none.
    A run whose search adds nothing and whose candidates are these has nothing to confirm."""
    confirmed = f["confirmed"][...] if "confirmed" in f else np.zeros(0, CONFIRMED_DTYPE)
    if not len(confirmed):
        return frozenset()
    last = confirmed[confirmed["run"] == confirmed["run"][-1]]
    return frozenset(int(i) for i in last["config_id"])
