"""The search's history as the file records it.

It holds every ask of every run, in order, and how each run that ended left its search.

A resumed run rebuilds its strategy by asking and telling a fresh one the same again
(mpitune/scheduling/resume.py). So the file never holds anything that is executed when read. A
strategy's pickled state once was, and a crafted file could run any code on resume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import h5py
import numpy as np

from mpitune.model.prior import PriorSource
from mpitune.model.schema import ASKED_DTYPE, LONG_TEXT, NAME_TEXT, PRIOR_DTYPE, SCHEDULE_DTYPE, SHORT_TEXT, TOLD_DTYPE
from mpitune.store.layout import fixed_text


def search_digest(key: str) -> str:
    """What the file keeps of a search's key (strategy, seed, options, objective as JSON)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Ask:
    """One ``strategy.ask(requested)`` that made batch ``batch`` of run ``run``, and what it answered.

    ``told`` is how many of the run's results rows the strategy had been told when it was asked.
    None where the batch rule says it (``History.ranks``)."""

    run: int
    batch: int
    requested: int
    ids: tuple[int, ...]
    told: int | None = None


@dataclass(frozen=True)
class SearchEnd:
    """How run ``run`` left its search.

    It is ``continuable`` unless ids it handed out came back unmeasured. The strategy counts those as
    seen and would never propose them again."""

    run: int
    digest: str
    continuable: bool


@dataclass(frozen=True)
class History:
    """The search's history, with the run, batch and rank of every results row.

    ``row_runs``, ``row_batches`` and ``row_ranks`` are in row order. Consecutive rows of one batch and
    rank are one report, told at once. ``ranks`` is how many ranks each run had. It says how its
    asks and tells interleaved where the asks do not record it (scheduling/batching.py,
    ``pipeline_depth``)."""

    asks: list[Ask]
    ends: list[SearchEnd]
    row_runs: np.ndarray
    row_batches: np.ndarray
    row_ranks: np.ndarray
    ranks: dict[int, int]
    priors: dict[int, tuple[str, ...]] = field(default_factory=dict)  # each run's priors' digests, in order
    schedules: dict[int, str] = field(default_factory=dict)  # how each run handed out its work, where recorded


def prior_rows(run: int, sources: Sequence[PriorSource]) -> np.ndarray:
    """The ``priors`` rows of run ``run``: where each prior came from and its digest."""
    rows = np.zeros(len(sources), PRIOR_DTYPE)
    for i, s in enumerate(sources):
        rows[i] = (
            run,
            fixed_text(s.path, LONG_TEXT),
            fixed_text(s.kernel_name, NAME_TEXT),
            fixed_text(s.device_name, NAME_TEXT),
            fixed_text(s.problem_size, NAME_TEXT),
            fixed_text(",".join(s.shared), LONG_TEXT),
            s.matched,
            s.sha256.encode(),
        )
    return rows


def schedule_rows(run: int, schedule: str) -> np.ndarray:
    """The ``schedules`` row of run ``run`` (none where ``schedule`` is not said)."""
    return np.array([(run, fixed_text(schedule, SHORT_TEXT))] if schedule else [], SCHEDULE_DTYPE)


def ask_rows(run: int, batch: int, requested: int, ids: Sequence[int], told: int | None) -> dict[str, np.ndarray]:
    """The rows one ask adds, by dataset.

    ``asked`` has one per id answered. ``told`` has one unless ``told`` is None. Then the batch rule
    says what was told, and nothing is written."""
    rows = {"asked": np.array([(run, batch, requested, i) for i in ids], dtype=ASKED_DTYPE)}
    if told is not None:
        rows["told"] = np.array([(run, batch, told)], dtype=TOLD_DTYPE)
    return rows


def read_history(f: h5py.File) -> History:
    """Everything recorded.

    A file written before the history existed gives empty lists. Asks have no ``told`` where the
    file has no row of it. That row is missing when written before it existed, or by the batch rule."""
    asks: list[Ask] = []
    told = {(int(r["run"]), int(r["batch"])): int(r["rows"]) for r in (f["told"][...] if "told" in f else [])}
    if "asked" in f and len(f["asked"]):
        rows = f["asked"][...]
        keys = rows[["run", "batch"]]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        for start, end in zip(starts, np.r_[starts[1:], len(rows)]):
            head = rows[start]
            asks.append(
                Ask(
                    int(head["run"]),
                    int(head["batch"]),
                    int(head["requested"]),
                    tuple(int(i) for i in rows["config_id"][start:end]),
                    told.get((int(head["run"]), int(head["batch"]))),
                )
            )
    ends = [
        SearchEnd(int(r["run"]), r["key"].decode(errors="replace"), bool(r["continuable"]))
        for r in (f["searches"][...] if "searches" in f else [])
    ]
    results = f["results"]
    runs = f["runs"][...]
    ranks = {int(r): int(n) for r, n in zip(runs["run"], runs["ranks"])}
    priors: dict[int, tuple[str, ...]] = {}
    for row in f["priors"][...] if "priors" in f else []:
        priors[int(row["run"])] = (*priors.get(int(row["run"]), ()), row["sha256"].decode(errors="replace"))
    schedules = {
        int(r["run"]): r["schedule"].decode(errors="replace") for r in (f["schedules"][...] if "schedules" in f else [])
    }
    row_runs, row_batches, row_ranks = (results.fields(name)[...] for name in ("run", "batch", "rank"))
    return History(asks, ends, row_runs, row_batches, row_ranks, ranks, priors, schedules)
