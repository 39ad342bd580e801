"""What ``report`` says of a cache file, as typed records.

Longer than 400 lines: the report's records and the one pass over a file's rows that fills them.

``report`` formats them as text. ``report --json`` writes them field by field
(``Summary.as_json``): the JSON keys are the field names, in their order.

Every time figure comes from the recorded timeline: intervals on one clock per run. So wall time
is measured, never a sum over configurations. For every rank, busy and idle time add up to its
wall time.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from mpitune.model.judging.pareto import front_rows
from mpitune.model.objective import Goal
from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.offline import confirmation as confirmed
from mpitune.offline import front
from mpitune.offline.confirmation import Confirmation, ConfirmationCost, DeviceCalibration, Throttled
from mpitune.offline.front import FrontSummary
from mpitune.offline.rank_time import (
    BatchWaits,
    GatherWaits,
    PhaseTotals,
    RankTime,
    Startup,
    rank_times,
    run_walls,
    startup,
)
from mpitune.offline.ranking import best_first
from mpitune.offline.tally import Tally
from mpitune.store import devices
from mpitune.store.reader import CacheData, Rows, Whole


@dataclass(frozen=True)
class Ranked:
    """A configuration ranked by the objective, with its metrics and observed values by name."""

    config: dict[str, Any]
    config_id: int
    time_ms: float
    objective: float
    metrics: dict[str, float]
    observed: dict[str, float]


@dataclass(frozen=True)
class TopEntry(Ranked):
    """One of the best, with the spread of its timed iterations (NaN, 0 iterations: none)."""

    min_ms: float
    max_ms: float
    std_ms: float
    iterations: int


@dataclass(frozen=True)
class ObjectiveValues:
    """The objective the file records, the values its rows hold, and the ranked rows' spread."""

    goal: Goal
    metrics: list[str]  # the names of the metrics each row holds
    observed: list[str]  # the names of the observed values each row holds
    median: float | None  # among the ranked rows
    worst: float | None

    def as_json(self) -> dict[str, Any]:
        """As ``report --json`` has written it since before several objectives.

        That is the first objective's name and direction (``pareto`` lists them all).
        """
        goal = self.goal
        return {
            "name": goal.name,
            "higher_is_better": goal.higher_is_better,
            **{k: v for k, v in asdict(self).items() if k != "goal"},
        }


@dataclass(frozen=True)
class ProblemSummary:
    """The tuned problem, as the file records it."""

    kernel: str
    lang: str
    problem_size: tuple[Any, ...]
    iterations: int
    params: dict[str, int]  # name -> how many values it has
    imported_from: str | None


@dataclass(frozen=True)
class DeviceUse:
    """A (host, device) pair and the ranks that used it, over all runs."""

    host: str
    device: str
    ranks: list[int]


@dataclass(frozen=True)
class RunSummary:
    """One run as its row records it; ``wall_s`` is measured, and so far for an unfinished run."""

    run: int
    started: str  # ISO 8601, UTC
    wall_s: float
    finished: bool
    status: str
    ranks: int
    strategy: str
    seed: int
    max_fevals: int | None  # None: no budget of evaluations
    time_limit_s: float | None  # None: no time limit
    batch_size: int
    space_size: int  # configurations in the restricted space
    measured: int
    command: str
    version: str
    # How it handed out its work: refill or batches (last, so that the JSON keeps the earlier keys'
    # order).
    schedule: str
    in_turn: bool  # no rank had compile workers (no background compile on its timeline)


@dataclass(frozen=True)
class RunPrior:
    """A prior a run started from: measurements made elsewhere.

    ``problem_size`` is as its file gave it. ``shared`` holds the parameters it shares with this
    space, ``matched`` how many of its configurations it matched.
    """

    run: int
    path: str
    kernel_name: str
    device: str
    problem_size: Any
    shared: list[str]
    matched: int
    sha256: str

    def describe(self) -> str:
        """The one wording of a prior, in ``report`` and on the HTML page."""
        return (
            f"{self.path}: kernel {self.kernel_name or '-'} on {self.device or '-'}, problem size "
            f"{json.dumps(self.problem_size)}; {self.matched} configurations matched on {', '.join(self.shared)}"
        )


@dataclass(frozen=True)
class Summary:
    """The whole report.

    ``failed`` counts each status but ok. ``efficiency`` is the share of the ranks' wall time spent
    measuring; None without wall time. ``pareto`` is None with one objective.
    """

    kernel: str
    lang: str
    space_size: int | None
    configs: int
    ok: int
    failed: dict[str, int]
    best: Ranked | None
    objective: ObjectiveValues
    top: list[TopEntry]
    median_ms: float | None
    worst_ms: float | None
    runs: int
    ranks: int
    wall_s: float
    per_rank: list[RankTime]
    efficiency: float | None
    gather: GatherWaits
    startup: Startup
    problem: ProblemSummary
    devices: list[DeviceUse]
    run_list: list[RunSummary]
    pareto: FrontSummary | None
    # The file's latest confirmation (None: none), what it cost, and its run's device factors.
    confirmation: Confirmation | None
    confirmation_cost: ConfirmationCost | None
    calibration: list[DeviceCalibration]
    throttled: list[Throttled]  # configurations timed again because their GPU was throttled
    prior: list[RunPrior]  # what each run's search started from, run by run

    def as_json(self) -> dict[str, Any]:
        """As ``report --json`` writes it: the fields, in their order."""
        return {**asdict(self), "objective": self.objective.as_json()}


def summarize(data: CacheData, top: int = 5) -> Summary:
    """The summary of a file read whole (``read``)."""
    return summarize_rows(Whole(data), top)


def summarize_rows(rows: Rows, top: int = 5) -> Summary:
    """The summary of a file's rows as they stream past (``reader.streamed``).

    It holds a slice of rows and a few numbers per row (``Tally``), whatever the file's size. The
    rows it shows are read again by index: the best, the front and the confirmation's.
    """
    data = rows.tables
    tally = Tally()
    totals = PhaseTotals()
    waits = BatchWaits()
    for part in rows.results():
        tally.add(part)
    confirming = _confirmation_batches(data)
    kept = [data.timeline]  # the confirmation's rows, for what a cut-short one cost
    for chunk in rows.timeline():
        totals.add(chunk)
        waits.add(chunk)
        kept.append(chunk[np.isin(chunk["run"].astype(np.int64) * (1 << 32) + chunk["batch"], confirming)])
    values = tally.values
    ranked = best_first(values, tally.usable, data.objective.higher_is_better)  # indices, best first
    shown = rows.rows(ranked[:top])
    ranks = rank_times(totals, data.ranks, tally.measured)
    runs = data.runs
    ends = totals.run_ends
    end_runs = np.array(list(ends), np.int64)
    walls = run_walls(runs["run"], runs["wall_s"], end_runs, np.array(list(ends.values())))
    # Every rank holds its device for the whole run, also when it has measured its last chunk
    # and left (with two batches in flight the fast ranks leave before the last batch is in).
    wall_rank_s = sum(int(n) * wall for n, wall in zip(runs["ranks"], walls))
    measuring_s = sum(r.compile_s + r.verify_s + r.benchmark_s for r in ranks)
    named = rows.rows(tally.first_rows({int(i) for i in data.confirmed["config_id"]}))
    confirmation, confirmation_cost, calibration = confirmed.latest(replace(named, timeline=np.concatenate(kept)))
    statuses = tally.statuses
    ok_ms = tally.ok_ms
    top_values = values[ranked[:top]]
    return Summary(
        kernel=data.problem.kernel_name,
        lang=data.problem.lang,
        space_size=int(runs["space_size"][-1]) if len(runs) else None,
        configs=len(np.unique(tally.config_ids)),
        ok=int(statuses.get(Status.OK, 0)),
        failed={k: int(v) for k, v in sorted(statuses.items()) if k != Status.OK},
        best=Ranked(**_ranked(shown, top_values, 0)) if len(top_values) else None,
        objective=_objective(data, values[ranked]),
        top=[
            TopEntry(**_ranked(shown, top_values, j), **_spread(shown.results[j]["times_ms"]))
            for j in range(len(top_values))
        ],
        median_ms=float(np.median(ok_ms)) if len(ok_ms) else None,
        worst_ms=float(ok_ms.max()) if len(ok_ms) else None,
        runs=len(runs),
        ranks=int(runs["ranks"].max()) if len(runs) else 0,
        wall_s=float(sum(walls)),
        per_rank=ranks,
        efficiency=measuring_s / wall_rank_s if wall_rank_s > 0 else None,
        gather=waits.result(),
        startup=startup(ranks),
        problem=_problem(data),
        devices=_devices(data.ranks),
        run_list=_runs(data, runs, walls),
        pareto=_front(rows, tally),
        confirmation=confirmation,
        confirmation_cost=confirmation_cost,
        calibration=calibration,
        throttled=tally.throttled,
        prior=priors(data),
    )


def _confirmation_batches(data: CacheData) -> np.ndarray:
    """The (run, batch) keys (run * 2**32 + batch) of the confirmations the file holds launches of."""
    retimed = data.retimed[np.isin(data.retimed["purpose"], (devices.CONFIRM, devices.UNMADE))]
    return np.unique(retimed["run"].astype(np.int64) * (1 << 32) + retimed["batch"])


def _front(rows: Rows, tally: Tally) -> FrontSummary | None:
    """The Pareto front of every row, from the objectives the tally kept.

    Its rows are read again; the front is also their own.
    """
    objective = rows.tables.objective
    if not objective.several:
        return None
    values = tally.objectives(len(objective.names))
    summary = front.summary(rows.rows(front_rows(values, objective.directions)))
    assert summary is not None
    return replace(summary, with_values=int(np.isfinite(values).all(axis=1).sum()))


def priors(data: CacheData) -> list[RunPrior]:
    """The priors each run started from, in the order the file records them (run by run)."""
    return [_prior(row) for row in data.priors]


def _prior(row: np.void) -> RunPrior:
    try:
        size = json.loads(str(row["problem_size"]))
    except ValueError:  # cut to the field's width
        size = str(row["problem_size"])
    return RunPrior(
        run=int(row["run"]),
        path=str(row["path"]),
        kernel_name=str(row["kernel_name"]),
        device=str(row["device"]),
        problem_size=size,
        shared=[n for n in str(row["shared"]).split(",") if n],
        matched=int(row["matched"]),
        sha256=str(row["sha256"]),
    )


def _objective(data: CacheData, ranked_values: np.ndarray) -> ObjectiveValues:
    """``ranked_values``: the objective's values, best first."""
    return ObjectiveValues(
        goal=data.objective,
        metrics=data.metric_names,
        observed=data.observed_names,
        median=float(np.median(ranked_values)) if len(ranked_values) else None,
        worst=float(ranked_values[-1]) if len(ranked_values) else None,
    )


def _ranked(data: CacheData, values: np.ndarray, i: int) -> dict[str, Any]:
    """The fields of ``Ranked`` for results row ``i``; ``values``: the objective's, every row's."""
    row = data.results[i]
    return {
        "config": {n: plain(row[n]) for n in data.param_names},
        "config_id": int(row["config_id"]),
        "time_ms": float(row["time_ms"]),
        "objective": float(values[i]),
        "metrics": {n: float(v) for n, v in zip(data.metric_names, data.metrics[i])},
        "observed": {n: float(v) for n, v in zip(data.observed_names, data.observed[i])},
    }


def _spread(times_ms: np.ndarray) -> dict[str, Any]:
    """The fields of ``TopEntry`` beyond ``Ranked``'s."""
    times = np.asarray(times_ms, dtype=float).ravel()
    times = times[~np.isnan(times)]
    if not len(times):
        return {"min_ms": math.nan, "max_ms": math.nan, "std_ms": math.nan, "iterations": 0}
    return {
        "min_ms": float(times.min()),
        "max_ms": float(times.max()),
        "std_ms": float(times.std()),
        "iterations": len(times),
    }


def _problem(data: CacheData) -> ProblemSummary:
    problem = data.problem
    return ProblemSummary(
        kernel=problem.kernel_name,
        lang=problem.lang,
        problem_size=problem.problem_size,
        iterations=problem.iterations,
        params={n: len(problem.tune_params.get(n, ())) for n in data.param_names},
        imported_from=problem.imported_from,
    )


def _devices(ranks: np.ndarray) -> list[DeviceUse]:
    found: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in ranks:
        found[(str(r["host"]), str(r["device"]))].add(int(r["rank"]))
    return [DeviceUse(h, d, sorted(rs)) for (h, d), rs in sorted(found.items())]


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")


def _runs(data: CacheData, runs: np.ndarray, walls: list[float]) -> list[RunSummary]:
    return [
        RunSummary(
            run=int(run["run"]),
            started=_iso(float(run["started_unix"])),
            wall_s=wall,
            finished=not math.isnan(float(run["wall_s"])),
            status=str(run["status"]),
            ranks=int(run["ranks"]),
            strategy=str(run["strategy"]),
            seed=int(run["seed"]),
            max_fevals=None if run["max_fevals"] < 0 else int(run["max_fevals"]),
            time_limit_s=None if math.isnan(run["time_limit_s"]) else float(run["time_limit_s"]),
            batch_size=int(run["batch_size"]),
            schedule=data.schedule_of(int(run["run"])),
            in_turn=not np.any((data.timeline["run"] == run["run"]) & (data.timeline["phase"] == "compile_ahead")),
            space_size=int(run["space_size"]),
            measured=int(run["measured"]),
            command=str(run["command"]),
            version=str(run["version"]),
        )
        for run, wall in zip(runs, walls)
    ]
