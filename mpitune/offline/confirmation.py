"""What ``report`` says of the file's latest confirmation (scheduling/devices/confirming.py).

It says the winner with its interval and the candidates tied with it. It says what confirming
cost, and each rank's device factor. Of a confirmation a stop cut short, it says what it made and
what it still owes. ``report --json`` writes these records field by field.

Every figure comes from the rows of that one confirmation; store/devices.py reads them. Rows a
write cut short left as zeros are set aside. So a file a full disk or a kill left in between
says what it holds, rather than mixing its tables."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.problem import plain
from mpitune.store import devices
from mpitune.store.reader import CacheData


@dataclass(frozen=True)
class Confirmation:
    """The winner and the configurations statistically tied with it, by their parameters.

    It holds the winner's median over every rank's launches, each divided by its rank's factor. It
    holds its bootstrap confidence interval too, in ms."""

    winner: dict[str, Any]
    winner_ms: float
    ci_ms: tuple[float, float]
    tied: list[dict[str, Any]]


@dataclass(frozen=True)
class ConfirmationCost:
    """What the confirmation timed and how long it took, against its run's wall time.

    For one a stop cut short: what it made so far and what it still ``owed``."""

    run: int
    candidates: int
    launches: int  # finite launches: of every run that worked on it
    seconds: float  # its latest run's part
    share_of_run: float | None  # None: the run has no wall time (still going)
    owed: int = 0  # launches a stop left unmade, which the next run makes before the verdict


@dataclass(frozen=True)
class DeviceCalibration:
    """One rank's device factor: its times over the ranks' common time, from the confirmation."""

    rank: int
    host: str
    device: str
    factor: float
    flagged: bool


def latest(data: CacheData) -> tuple[Confirmation | None, ConfirmationCost | None, list[DeviceCalibration]]:
    """The file's latest confirmation with a verdict and its cost, and the latest run's device factors.

    The factors come from its confirmation, else from its last calibration during the search. The
    latest confirmation may have been cut short by a stop. Then there is no verdict, only what it
    has (``owed``)."""
    factors = data.device_factors[np.char.str_len(data.device_factors["source"].astype(str)) > 0]
    calibration = _calibration(data, int(factors["run"][-1])) if len(factors) else []
    pending = devices.pending(data.retimed, data.results["run"])
    if pending is not None:
        return None, _pending_cost(data, pending), calibration
    mine = devices.verdict_rows(data.confirmed)
    if not len(mine):
        return None, None, calibration
    run = int(mine["run"][0])
    winner = mine[0]
    tied = [_config(data, int(i)) for i in mine[mine["tied"] == 1]["config_id"]]
    winner_config = _config(data, int(winner["config_id"]))
    if winner_config is None:  # its results row was lost to damage (check --salvage): no verdict to show
        return None, None, calibration
    confirmation = Confirmation(
        winner=winner_config,
        winner_ms=float(winner["median_ms"]),
        ci_ms=(float(winner["ci_lo_ms"]), float(winner["ci_hi_ms"])),
        tied=[t for t in tied if t is not None],
    )
    seconds = float(winner["finished_s"] - winner["started_s"])
    # A killed run's wall time is its last recorded timeline row, which may come before the
    # confirmation's record (its rows are written after it): the run lasted at least that long.
    walls = data.runs["wall_s"][data.runs["run"] == run]
    wall_s = max(float(walls[0]), float(winner["finished_s"])) if len(walls) else math.nan
    cost = ConfirmationCost(
        run=run,
        candidates=len(mine),
        launches=int(mine["launches"].sum()),  # made: not failed, nor dropped as clearly slower
        seconds=seconds,
        share_of_run=seconds / wall_s if wall_s > 0 else None,
    )
    return confirmation, cost, calibration


def _pending_cost(data: CacheData, pending: devices.Pending) -> ConfirmationCost:
    """What a confirmation a stop cut short has.

    That is its launches made, what its latest part took (its rows on the timeline), and what it
    still owes."""
    rows = data.timeline[(data.timeline["run"] == pending.run) & (data.timeline["batch"] == pending.batch)]
    seconds = float(rows["end_s"].max() - rows["start_s"].min()) if len(rows) else 0.0
    walls = data.runs["wall_s"][data.runs["run"] == pending.run]
    wall_s = max(float(walls[0]), float(rows["end_s"].max()) if len(rows) else 0.0) if len(walls) else math.nan
    return ConfirmationCost(
        run=pending.run,
        candidates=len(pending.candidates),
        launches=sum(1 for _, x in pending.launches if math.isfinite(x.time_ms)),
        seconds=seconds,
        share_of_run=seconds / wall_s if wall_s > 0 else None,
        owed=sum(pending.owed.values()),
    )


@dataclass(frozen=True)
class Throttled:
    """A configuration whose first timing the GPU throttled, so that it was timed again."""

    config: dict[str, Any]
    rank: int
    why: str  # the causes (power, thermal, slowdown), and "again: ..." if the second was too


def throttled(data: CacheData) -> list[Throttled]:
    """Every configuration timed again because its GPU was throttled, in the order measured."""
    rows = data.results[data.results["throttled"] != ""]
    return [Throttled({n: plain(r[n]) for n in data.param_names}, int(r["rank"]), str(r["throttled"])) for r in rows]


def throttled_text(entries: list[Throttled]) -> list[str]:
    if not entries:
        return []
    lines = [f"\n  timed again because the GPU was throttled while they were timed ({len(entries)}):"]
    return lines + [f"    rank {t.rank}: {t.why}: {_params(t.config)}" for t in entries]


def _config(data: CacheData, config_id: int) -> dict[str, Any] | None:
    """The parameters of ``config_id`` as its results row holds them; None without one."""
    rows = data.results[data.results["config_id"] == config_id]
    return {n: plain(rows[0][n]) for n in data.param_names} if len(rows) else None


def _calibration(data: CacheData, run: int) -> list[DeviceCalibration]:
    """``run``'s device factors.

    They are its confirmation's, which rest on the most launches. Else they are its latest estimate
    during the search. A device flagged by any estimate of the run stays flagged."""
    mine = data.device_factors[data.device_factors["run"] == run]
    confirm = mine[mine["source"] == "confirm"]
    factors = confirm if len(confirm) else mine[mine["batch"] == mine["batch"].max()]
    ever = {int(r) for r in mine["rank"][mine["flagged"] == 1]}
    ranks = data.ranks[data.ranks["run"] == run]
    where = {int(r["rank"]): (str(r["host"]), str(r["device"])) for r in ranks}
    return [
        DeviceCalibration(
            int(f["rank"]), *where.get(int(f["rank"]), ("", "")), float(f["factor"]), int(f["rank"]) in ever
        )
        for f in factors
    ]


def confirmation_lines(
    confirmation: Confirmation | None, cost: ConfirmationCost | None, calibration: list[DeviceCalibration]
) -> list[str]:
    """The report's lines on the confirmation and the device factors; none without either."""
    if confirmation is None and cost is not None:
        return [
            f"\n  confirmation cut short by a stop (run {cost.run}: {cost.candidates} candidates, "
            f"{cost.launches} launches made and kept, {cost.owed} still owed): no verdict yet; "
            "the same command makes the rest and names the winner"
        ] + _factor_lines(calibration)
    if confirmation is None or cost is None:
        return _factor_lines(calibration)
    lo_ms, hi_ms = confirmation.ci_ms
    share = f", {100 * cost.share_of_run:.1f} % of run {cost.run}" if cost.share_of_run is not None else ""
    lines = [
        f"\n  confirmed (run {cost.run}: {cost.candidates} candidates, {cost.launches} launches interleaved "
        f"on every rank, {cost.seconds:.3g} s{share}):",
        f"  winner {confirmation.winner_ms:.4g} ms [{lo_ms:.4g}, {hi_ms:.4g}] {_params(confirmation.winner)}",
    ]
    if confirmation.tied:
        lines.append(f"  statistically tied with it ({len(confirmation.tied)}):")
        lines += [f"    {_params(c)}" for c in confirmation.tied]
    else:
        lines.append("  no candidate is tied with it")
    return lines + _factor_lines(calibration)


def _factor_lines(calibration: list[DeviceCalibration]) -> list[str]:
    if len(calibration) < 2:
        return []
    return [
        "\n  device factors (times over the ranks' common time): "
        + "; ".join(f"rank {d.rank} {d.factor:.4f}" + (" FLAGGED" if d.flagged else "") for d in calibration)
    ]


def _params(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())
