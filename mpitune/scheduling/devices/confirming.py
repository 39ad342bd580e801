"""Rank 0's confirmation: once the search has ended by itself, the best candidates are timed
again, interleaved round after round on every rank, and judged (model/confirmation.py).

The search's best is the smallest of many noisy medians, each measured once on one device: among
configurations within noise of each other it is a draw, and on several devices each median also
carries its device's bias. Timing the few candidates again on every device, in turn, gives each
the same devices and the same drift, from which the devices' factors come out and the candidates'
medians can be compared; the winner is then named with the candidates it cannot be told from.

Only a search that ended on its own (``FINISHED``, ``MAX_FEVALS``) is confirmed: one cut short
is resumed, and confirmed when it ends. A resumed run whose candidates are the ones the file's
latest confirmation judged does not time them again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mpitune.model.confirmation import Verdict, candidates, judge_launches
from mpitune.model.result import Scored
from mpitune.model.work import MOST_CANDIDATES, Retime, Work
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.store.cache import Cache

log = logging.getLogger(__name__)

CONFIRMABLE = (StopReason.FINISHED, StopReason.MAX_FEVALS)
SHOWN_TIES = 3  # in the progress line; report lists them all
LAUNCHES_PER_CANDIDATE = 30  # over all ranks: what a candidate's median and interval rest on
MIN_ROUNDS = 5  # per rank: what its device factor rests on, with every candidate's launches
# Fewer rounds (not below MIN_ROUNDS) where the candidates' launches would take more than this
# share of the run so far: slow kernels have fewer configurations timed per second to confirm.
SHARE_OF_RUN = 0.03


def rounds_for(ranks: int, round_s: float = 0.0, run_s: float = math.inf) -> int:
    """Rounds per rank: the launches per candidate shared over the ranks, fewer if one round
    (``round_s``: every candidate launched once) would make the confirmation cost more than
    ``SHARE_OF_RUN`` of the ``run_s`` seconds the run has taken; at least ``MIN_ROUNDS``."""
    rounds = math.ceil(LAUNCHES_PER_CANDIDATE / ranks)
    if round_s > 0 and math.isfinite(run_s):
        rounds = min(rounds, math.floor(SHARE_OF_RUN * run_s / round_s))
    return max(MIN_ROUNDS, rounds)


class Confirming:
    """What rank 0 needs to confirm: the timed results that may be candidates, then the verdict.

    ``k`` is how many of the best to confirm (0: none); confirmation needs the objective to be
    the kernel time, as racing does: only then is the candidate with the smallest median of its
    launches the best."""

    def __init__(
        self, k: int, ranks: int, kernel_time: bool, cache: Cache, recorded: frozenset[tuple[Any, ...]] = frozenset()
    ):
        self.k, self.ranks, self.cache = k, ranks, cache
        self.recorded = recorded  # a replay's: the candidates its run confirmed, by parameter values
        self.wanted = k > 0 and kernel_time
        self.retime: Retime | None = None
        self.started_s = math.nan
        self.batch = -1  # the batch number the confirmation went out as
        self.verdict: Verdict | None = None
        self._asked = False

    def orders(
        self,
        stop: StopReason,
        now_s: float,
        batch: int,
        leaders: Sequence[Scored],
        work: Callable[[list[int]], dict[int, Work]],
        factor_sd: Mapping[int, float] | None = None,
    ) -> list[Order] | None:
        """The orders of the confirmation, once, when the search stopped for ``stop``, of
        candidates among ``leaders`` (devices/leaders.py, in calibrated time, with ``factor_sd``
        the relative error of each rank's factor: ``Calibrating.factor_sd``); None when there
        is nothing to confirm (then or already)."""
        if not self.wanted or self._asked or stop not in CONFIRMABLE:
            return None
        self._asked = True
        ids = self._recorded(leaders) or candidates(leaders, self.k, MOST_CANDIDATES, factor_sd)
        if len(ids) < 2:
            return None  # nothing to choose between
        if frozenset(ids) == self.cache.confirmed_candidates():
            log.info("the file's latest confirmation judged these %d candidates: not timed again", len(ids))
            return None
        made = work(ids)
        time_ms = {r.config_id: r.time_ms for r in leaders}
        round_s = sum(time_ms[i] for i in ids) / 1e3
        self.retime = Retime(tuple(made[i] for i in ids), rounds_for(self.ranks, round_s, now_s))
        self.started_s, self.batch = now_s, batch
        return [Order(now_s, batch, retime=self.retime)] * self.ranks

    def _recorded(self, leaders: Sequence[Scored]) -> list[int]:
        """A replay's candidates: those its run confirmed, best first, when all are among the
        ``leaders`` (their choice rests on the run's first launches, which a file does not
        keep, so a replay could not choose them again); else none."""
        chosen = [r for r in leaders if tuple(r.config.values()) in self.recorded]
        if not self.recorded or len({r.config_id for r in chosen}) != len(self.recorded):
            return []
        return list(dict.fromkeys(r.config_id for r in sorted(chosen, key=lambda r: (r.time_ms, r.config_id))))

    def record(self, reports: Sequence[Report], now_s: float, whole: bool, seed: int, margin: float) -> None:
        """The launches into the file; judged when ``whole`` (every rank's report came, and
        its device can be trusted): part of a confirmation is no verdict, and the next run
        confirms again."""
        launches = [(rank, launch) for rank, report in enumerate(reports) for launch in report.launches]
        self.verdict = judge_launches(launches, seed=seed, flag_pct=100 * margin) if whole else None
        self.cache.append_confirmation(self.batch, launches, self.verdict, self.started_s, now_s)
        if self.verdict is not None:
            for f in self.verdict.factors:
                if f.flagged:
                    log.warning(
                        "rank %d's device times %.3g x the others' (confirmation, ± %.2g)", f.rank, f.factor, f.sd
                    )

    def describe(self, config: Callable[[int], str]) -> str:
        """The verdict as the progress line says it; ``config`` formats a configuration by id."""
        v, retime = self.verdict, self.retime
        if v is None or retime is None:
            return "confirmation: no verdict (a rank's launches are missing; the next run confirms again)"
        lo_ms, hi_ms = v.ci_ms
        shown = ", ".join(config(i) for i in v.tied[:SHOWN_TIES])
        more = (
            f" and {len(v.tied) - SHOWN_TIES} more (python -m mpitune report lists them)"
            if len(v.tied) > SHOWN_TIES
            else ""
        )
        tied = f", tied with {len(v.tied)}: {shown}{more}" if v.tied else ", no ties"
        return (
            f"confirmed best {v.winner_ms:.4g} ms [{lo_ms:.4g}, {hi_ms:.4g}] {config(v.winner)}{tied} "
            f"({len(retime.work)} candidates x {retime.rounds} rounds on {self.ranks} rank(s))"
        )
