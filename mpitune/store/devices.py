"""The rows of how the ranks' devices compare, which the writer (cache.py) appends to the file:
every launch of a calibration or a confirmation (``retimed``), the verdict on each confirmed
candidate (``confirmed``) and each rank's device factor (``device_factors``), as tables of their
own beside the search's rows, which they leave untouched: the search's medians stay what the
search measured.

Rank 0 writes a confirmation whole, after the last report of it came in, and flushes; a run
killed before that leaves no part of it, and the next run confirms again.
"""

from __future__ import annotations

from collections.abc import Sequence

import h5py
import numpy as np

from mpitune.model.confirmation import DeviceFactor, Verdict
from mpitune.model.schema import CONFIRMED_DTYPE, DEVICE_FACTOR_DTYPE, RETIMED_DTYPE, SHORT_TEXT
from mpitune.model.work import Launch
from mpitune.store.layout import text

CALIBRATE, CONFIRM = "calibrate", "confirm"  # the purposes of retimed launches


def launch_rows(run: int, batch: int, launches: Sequence[tuple[int, Launch]], purpose: str) -> np.ndarray:
    """The ``retimed`` rows of ``launches``, (rank, launch), of one calibration or confirmation."""
    rows = np.zeros(len(launches), RETIMED_DTYPE)
    tag = text(purpose, SHORT_TEXT)
    for i, (rank, launch) in enumerate(launches):
        rows[i] = (run, batch, rank, launch.config_id, launch.round, launch.time_ms, tag)
    return rows


def factor_rows(run: int, batch: int, factors: Sequence[DeviceFactor], source: str) -> np.ndarray:
    """The ``device_factors`` rows of one estimate of the ranks' device factors."""
    rows = np.zeros(len(factors), DEVICE_FACTOR_DTYPE)
    tag = text(source, SHORT_TEXT)
    for i, d in enumerate(factors):
        rows[i] = (run, batch, d.rank, d.factor, d.sd, d.flagged, tag)
    return rows


def confirmed_rows(run: int, verdict: Verdict, started_s: float, finished_s: float) -> np.ndarray:
    """The ``confirmed`` rows of a confirmation's verdict, one per candidate."""
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
    return confirmed


def latest_candidates(f: h5py.File) -> frozenset[int]:
    """The candidates of the file's latest confirmation with a verdict; empty when it has none.
    A run whose search adds nothing and whose candidates are these has nothing to confirm."""
    confirmed = f["confirmed"][...] if "confirmed" in f else np.zeros(0, CONFIRMED_DTYPE)
    if not len(confirmed):
        return frozenset()
    last = confirmed[confirmed["run"] == confirmed["run"][-1]]
    return frozenset(int(i) for i in last["config_id"])
