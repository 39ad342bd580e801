"""Writing a confirmation into the file: every launch of it, the verdict on each candidate and
each rank's device factor, as tables of their own (schema.CONFIRMED_COLUMNS) beside the search's
rows, which it leaves untouched: the search's medians stay what the search measured.

Rank 0 writes all three at once, after the last report of the confirmation came in, and
flushes; a run killed before that leaves no part of a confirmation, and the next run does it
again.
"""

from __future__ import annotations

from collections.abc import Sequence

import h5py
import numpy as np

from mpitune.model.confirmation import Verdict
from mpitune.model.launches import Launch
from mpitune.model.schema import CONFIRM_LAUNCH_DTYPE, CONFIRMED_DTYPE, DEVICE_FACTOR_DTYPE, SHORT_TEXT
from mpitune.store.layout import text


def _append(ds: h5py.Dataset, rows: np.ndarray) -> None:
    if len(rows):
        n = ds.shape[0]
        ds.resize((n + len(rows),))
        ds[n:] = rows


def write(
    f: h5py.File,
    run: int,
    launches: Sequence[tuple[int, Launch]],
    verdict: Verdict | None,
    started_s: float,
    finished_s: float,
) -> None:
    """Append one confirmation of ``run``: ``launches`` as (rank, launch); without a verdict (no
    candidate could be launched) only the launches."""
    rows = np.zeros(len(launches), CONFIRM_LAUNCH_DTYPE)
    for i, (rank, launch) in enumerate(launches):
        rows[i] = (run, rank, launch.config_id, launch.round, launch.time_ms)
    _append(f["confirm_launches"], rows)
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
        _append(f["confirmed"], confirmed)
        factors = np.zeros(len(verdict.factors), DEVICE_FACTOR_DTYPE)
        for i, d in enumerate(verdict.factors):
            factors[i] = (run, d.rank, d.factor, d.sd, d.flagged, text("confirm", SHORT_TEXT))
        _append(f["device_factors"], factors)
    f.flush()


def latest_candidates(f: h5py.File) -> frozenset[int]:
    """The candidates of the file's latest confirmation with a verdict; empty when it has none.
    A run whose search adds nothing and whose candidates are these has nothing to confirm."""
    confirmed = f["confirmed"][...] if "confirmed" in f else np.zeros(0, CONFIRMED_DTYPE)
    if not len(confirmed):
        return frozenset()
    last = confirmed[confirmed["run"] == confirmed["run"][-1]]
    return frozenset(int(i) for i in last["config_id"])
