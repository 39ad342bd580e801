"""Everything the page shows, as one JSON-able object: the header, the charts and the table.

The static report embeds it; the live server sends it again whenever the file changed. One
builder for both keeps the two pages the same.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from plotly.io.json import to_json_plotly

from mpitune.model.objective import TIME
from mpitune.model.result import Status
from mpitune.offline.analysis import Tables, load
from mpitune.offline.html import charts, front
from mpitune.offline.html.timeline import timeline
from mpitune.offline.html.view import Limits, View, view
from mpitune.offline.summary import RunPrior

log = logging.getLogger(__name__)

# Each chart of the page, in the order it is shown; a file of several objectives adds its Pareto
# chart (objective 1 against objective 2, the front highlighted; html/front.py) after the first.
CHARTS = (charts.convergence, charts.distribution, charts.parameters, timeline, charts.failures)


@dataclass
class Header:
    """The page's header: what was tuned, how far it got, and the best, as ``report`` says."""

    kernel: str
    lang: str
    source: str  # where the data came from: a run, an import or a replay
    objective: str
    direction: str
    configs: int
    space_size: int | None
    ok: int
    failed: dict[str, int]
    runs: int
    ranks: int
    state: str  # the newest run's status: running, finished, ...
    best: float | None = None
    best_config: str = ""
    confirmed: str = ""  # the confirmation's verdict, as ``report`` says it; empty without one
    priors: list[RunPrior] = field(default_factory=list)  # what each run's search started from, run by run
    prior_lines: list[str] = field(default_factory=list)  # each as ``report`` says it (RunPrior.describe)


@dataclass
class Table:
    """The best configurations, best first; the page sorts it by any column."""

    columns: list[str]
    rows: list[list[Any]]
    note: str


def _source(v: View) -> str:
    strategies = v.runs["strategy"].astype(str).tolist()
    if v.problem.imported_from:
        return f"imported from {v.problem.imported_from}"
    if any(c.startswith("replay") or " replay " in f" {c} " for c in v.runs["command"].astype(str)):
        return f"replay ({', '.join(dict.fromkeys(strategies))})"
    return f"tuning run ({', '.join(dict.fromkeys(strategies))})"


def header(v: View) -> Header:
    res, obj = v.results, v.objective
    ranked = obj.ranked()
    statuses = res["status"].value_counts()
    runs = v.runs
    s = Header(
        kernel=v.problem.kernel_name,
        lang=v.problem.lang,
        source=_source(v),
        objective=obj.label,
        direction=obj.direction,
        configs=int(res["config_id"].nunique()),
        space_size=int(runs["space_size"].iloc[-1]) if len(runs) else None,
        ok=int(statuses.get(Status.OK, 0)),
        failed={str(k): int(n) for k, n in statuses.items() if k != Status.OK},
        runs=len(runs),
        ranks=int(runs["ranks"].max()) if len(runs) else 0,
        state=str(runs["status"].iloc[-1]) if len(runs) else "no run yet",
        priors=v.priors,
        prior_lines=[p.describe() for p in v.priors],
    )
    if len(ranked):
        i = int(ranked[0])
        s.best = float(obj.values[i])
        s.best_config = ", ".join(f"{n}={_cell(res[n].iloc[i])}" for n in v.param_names)
    s.confirmed = _confirmed(v.confirmation)
    return s


def _confirmed(confirmation: dict[str, Any] | None) -> str:
    if not confirmation:
        return ""
    lo_ms, hi_ms = confirmation["ci_ms"]
    params = ", ".join(f"{k}={v}" for k, v in confirmation["winner"].items())
    tied = confirmation["tied"]
    ties = (
        "; tied with " + " | ".join(", ".join(f"{k}={v}" for k, v in t.items()) for t in tied) if tied else "; no ties"
    )
    return f"{confirmation['winner_ms']:.4g} ms [{lo_ms:.4g}, {hi_ms:.4g}] ({params}){ties}"


def _cell(value: Any) -> Any:
    """A table cell as JSON takes it: plain numbers (NaN as None) and strings."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def table(v: View) -> Table:
    res, obj = v.results, v.objective
    ranked = obj.ranked()
    top = ranked[: v.limits.top]
    extra = [] if obj.goal.name == TIME else [obj.goal.name]
    columns = ["#", *extra, "time_ms", *v.param_names, "iterations", "std_ms", "run", "rank", "host", "device"]
    picked = res.iloc[top]
    cells = [picked[c].tolist() for c in columns[1 + len(extra) :]]
    rows = [
        [place, *([float(obj.values[i])] if extra else []), *(_cell(col[place - 1]) for col in cells)]
        for place, i in enumerate(top, start=1)
    ]
    note = (
        f"the best {len(top):,} of {len(ranked):,} configurations with a value"
        if len(ranked) > len(top)
        else f"all {len(ranked):,} configurations with a value"
    )
    return Table(columns, rows, note + f", ranked by {obj.label} ({obj.direction}); click a column to sort")


def build(tables: Tables, path: str, limits: Limits | None = None, version: str = "") -> dict[str, Any]:
    """The page's content for ``tables`` (the loader's), read from ``path``."""
    started = time.perf_counter()
    v = view(tables, limits)
    built = [chart(v) for chart in CHARTS]
    if front.several(v):
        built.insert(1, front.pareto(v))
    out = {
        "version": version,
        "path": path,
        "summary": asdict(header(v)),
        "charts": [asdict(c) for c in built],
        "table": asdict(table(v)),
    }
    log.debug(
        "built the report of %s (%d configurations) in %.2f s", path, len(v.results), time.perf_counter() - started
    )
    return out


def build_from_file(path: str, limits: Limits | None = None, version: str = "") -> dict[str, Any]:
    return build(load(path), path, limits, version)


def to_json(payload: dict[str, Any]) -> str:
    """JSON with numpy arrays as lists (plotly's encoder), NaN as null."""
    return str(to_json_plotly(payload))
