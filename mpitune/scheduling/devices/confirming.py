"""Rank 0's confirmation: once the search has ended by itself, the best candidates are timed again,
interleaved round after round on the ranks, and judged (model/judging/confirmation.py).

The search's best is the smallest of many noisy medians, each measured once on one device: among
configurations within noise of each other it is a draw. Timed again on every device in turn, the
candidates share devices and drift; the devices' factors come out, and the winner is named with the
candidates it cannot be told from. On many ranks the two best (``ANCHORS``) go to every rank, for
the factors, and the others are spread (``spread``).

Only a search that ended on its own (``FINISHED``, ``MAX_FEVALS``) is confirmed. A stop during the
confirmation cuts it short, and the resumed run makes only what is owed (``record``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mpitune.model.judging.candidates import candidates
from mpitune.model.judging.confirmation import Verdict, judge_launches
from mpitune.model.result import Scored
from mpitune.model.work import MOST_CANDIDATES, Launch, Retime, Work
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.store.cache import Cache
from mpitune.store.devices import Pending

log = logging.getLogger(__name__)

CONFIRMABLE = (StopReason.FINISHED, StopReason.MAX_FEVALS)
SHOWN_TIES = 3  # in the progress line; report lists them all
LAUNCHES_PER_CANDIDATE = 30  # over all ranks: what a candidate's median and interval rest on
MIN_ROUNDS = 5  # per rank: what its device factor rests on, with every candidate's launches
# Fewer rounds (not below MIN_ROUNDS) where the candidates' launches would take more than this
# share of the run so far: slow kernels have fewer configurations timed per second to confirm.
SHARE_OF_RUN = 0.03
ANCHORS = 2  # the best candidates, timed on every rank: the devices' factors rest on them


def rounds_for(ranks: int, round_s: float = 0.0, run_s: float = math.inf) -> int:
    """Rounds per rank: the launches per candidate shared over the ranks, at least ``MIN_ROUNDS``.
    Fewer where one round (``round_s``: every candidate once) would cost more than ``SHARE_OF_RUN``
    of the ``run_s`` seconds the run took."""
    rounds = math.ceil(LAUNCHES_PER_CANDIDATE / ranks)
    if round_s > 0 and math.isfinite(run_s):
        rounds = min(rounds, math.floor(SHARE_OF_RUN * run_s / round_s))
    return max(MIN_ROUNDS, rounds)


def spread(ids: Sequence[int], ranks: int, rounds: int) -> list[tuple[int, ...]]:
    """Each rank's candidates: the ``ANCHORS`` best on every rank, the others in consecutive runs.
    Each rank gets as many as give every candidate ``LAUNCHES_PER_CANDIDATE`` launches in ``rounds``
    rounds. Every candidate goes to every rank where that would not at least halve the others'
    launches.

    Args:
        ids: the candidates, best first.
        ranks: how many ranks share the confirmation.
        rounds: rounds per rank.

    Returns:
        One tuple of candidate ids per rank, anchors first.
    """
    anchors, others = tuple(ids[:ANCHORS]), list(ids[ANCHORS:])
    each = math.ceil(len(others) * LAUNCHES_PER_CANDIDATE / (ranks * rounds)) if others else 0
    if 2 * each > len(others):
        return [tuple(ids)] * ranks
    return [anchors + tuple(others[(rank * each + j) % len(others)] for j in range(each)) for rank in range(ranks)]


class Confirming:
    """What rank 0 needs to confirm: the timed results that may be candidates, then the verdict.

    ``k`` is how many of the best to confirm (0: none). Confirmation needs the objective to be the
    kernel time, as racing does: only then is the smallest median of launches the best."""

    def __init__(
        self, k: int, ranks: int, kernel_time: bool, cache: Cache, recorded: frozenset[tuple[Any, ...]] = frozenset()
    ):
        self.k, self.ranks, self.cache = k, ranks, cache
        self.recorded = recorded  # a replay's: the candidates its run confirmed, by parameter values
        self.wanted = k > 0 and kernel_time
        self.retime: Retime | None = None  # every candidate, as the flight and the progress line name it
        self.shares: list[Retime] = []  # rank by rank: its candidates (``spread``)
        self.started_s = math.nan
        self.batch = -1  # the batch number the confirmation went out as
        self.verdict: Verdict | None = None
        self.earlier: Pending | None = None  # the confirmation a stop cut short, which this run finishes
        self.owed: dict[int, int] = {}  # by candidate: the launches owed when this run's part went out
        self.left: dict[int, int] = {}  # and once it was recorded
        self.made = 0  # the launches this run's part made
        self._asked = False

    def orders(
        self,
        stop: StopReason,
        now_s: float,
        batch: int,
        leaders: Sequence[Scored],
        work: Callable[[list[int]], dict[int, Work]],
        factor_sd: Mapping[int, float] | None = None,
        extra: Mapping[int, float] | None = None,
    ) -> list[Order] | None:
        """The confirmation's orders, once, when the search stopped for ``stop``. The candidates
        come from ``leaders`` (devices/leaders.py, in calibrated time). ``factor_sd`` is each rank's
        factor's relative error (``Calibrating.factor_sd``). ``extra``: more candidates, by id, with
        their time (ms), timed beside them: a job's portable ones (``--portable``). None when there
        is nothing to confirm."""
        if not self.wanted or self._asked or stop not in CONFIRMABLE:
            return None
        self._asked = True
        extra = extra or {}
        ids = self._recorded(leaders) or candidates(leaders, self.k, MOST_CANDIDATES, factor_sd)
        ids += [i for i in extra if i not in ids]
        if len(ids) < 2:
            return None  # nothing to choose between
        known = self.cache.confirmations()
        pending = known.pending
        if pending is not None and (not pending.searched_since or frozenset(ids) == frozenset(pending.candidates)):
            return self._finish(pending, now_s, batch, work)
        if known.verdict is not None and frozenset(ids) == {c.config_id for c in known.verdict.candidates}:
            log.info("the file's latest confirmation judged these %d candidates: not timed again", len(ids))
            self.verdict = known.verdict  # the run names its winner, as the file does
            return None
        time_ms = {**extra, **{r.config_id: r.time_ms for r in leaders}}
        rounds = rounds_for(self.ranks, sum(time_ms[i] for i in ids) / 1e3, now_s)
        shares = spread(ids, self.ranks, rounds)
        self.owed = dict(Counter(i for share in shares for i in share for _ in range(rounds)))
        return self._hand_out(ids, shares, rounds, now_s, batch, work)

    def _finish(
        self, pending: Pending, now_s: float, batch: int, work: Callable[[list[int]], dict[int, Work]]
    ) -> list[Order]:
        """The orders that make what a cut-short confirmation still owes, over this run's ranks."""
        self.earlier, self.owed = pending, dict(pending.owed)
        rounds = max(1, math.ceil(max(pending.owed.values()) / self.ranks))
        log.info(
            "finishing the confirmation of run %d: %d launches kept, %d owed; %d round(s) on %d rank(s)",
            pending.run,
            pending.made,
            sum(pending.owed.values()),
            rounds,
            self.ranks,
        )
        ids = list(pending.candidates)
        return self._hand_out(ids, [tuple(ids)] * self.ranks, rounds, now_s, batch, work)

    def _hand_out(
        self,
        ids: list[int],
        shares: list[tuple[int, ...]],
        rounds: int,
        now_s: float,
        batch: int,
        work: Callable[[list[int]], dict[int, Work]],
    ) -> list[Order]:
        """The orders that time ``shares[rank]`` on each rank, ``rounds`` rounds."""
        made = work(ids)
        self.retime = Retime.of((made[i] for i in ids), rounds)
        self.shares = [Retime.of((made[i] for i in share), rounds) for share in shares]
        self.started_s, self.batch = now_s, batch
        log.info(
            "confirming %d candidates: %d round(s) on each of %d rank(s), %d to %d candidates a rank",
            len(ids),
            rounds,
            self.ranks,
            min(map(len, shares)),
            max(map(len, shares)),
        )
        return [Order(now_s, batch, retime=share) for share in self.shares]

    def _recorded(self, leaders: Sequence[Scored]) -> list[int]:
        """A replay's candidates: those its run confirmed, best first, if all are among ``leaders``;
        else none. Their choice rests on the run's first launches, which a file does not keep."""
        chosen = [r for r in leaders if tuple(r.config.values()) in self.recorded]
        if not self.recorded or len({r.config_id for r in chosen}) != len(self.recorded):
            return []
        return list(dict.fromkeys(r.config_id for r in sorted(chosen, key=lambda r: (r.time_ms, r.config_id))))

    def record(self, reports: Sequence[Report], now_s: float, trusted: bool, seed: int, margin: float) -> None:
        """Record every rank's launches (``reports``, in rank order). Judged with the earlier runs'
        once nothing is owed and every device is ``trusted``. A part cut short is kept with what it
        owes (store/devices.py, ``Pending``); one with a lost device is no verdict."""
        offset = self.earlier.next_round if self.earlier is not None else 0
        mine = [
            (rank, Launch(x.config_id, x.round + offset, x.time_ms))
            for rank, report in enumerate(reports)
            for x in report.launches
        ]
        made = Counter(x.config_id for _, x in mine)
        self.made, self.left = len(mine), {c: max(0, n - made[c]) for c, n in self.owed.items()}
        cut = trusted and any(self.left.values())
        every = [*(self.earlier.launches if self.earlier is not None else ()), *mine]
        self.verdict = judge_launches(every, seed=seed, flag_pct=100 * margin) if trusted and not cut else None
        unmade = self._unmade(mine, offset) if cut else []
        self.cache.append_confirmation(self.batch, mine, self.verdict, self.started_s, now_s, unmade)
        if self.verdict is not None:
            for f in self.verdict.factors:
                if f.flagged:
                    log.warning(
                        "rank %d's device times %.3g x the others' (confirmation, ± %.2g)", f.rank, f.factor, f.sd
                    )

    def _unmade(self, mine: Sequence[tuple[int, Launch]], offset: int) -> list[tuple[int, Launch]]:
        """The launches of this run's part not made, as many of each candidate as it still owes
        (``left``). Each is a NaN launch at its place in the plan."""
        done = {(rank, x.config_id, x.round) for rank, x in mine}
        slots = [
            (rank, Launch(c, offset + r, math.nan))
            for r in range(max((share.rounds for share in self.shares), default=0))
            for rank, share in enumerate(self.shares)
            for c in share.ids
            if (rank, c, offset + r) not in done
        ]
        taken: Counter[int] = Counter()
        unmade = []
        for rank, x in slots:
            if taken[x.config_id] < self.left.get(x.config_id, 0):
                taken[x.config_id] += 1
                unmade.append((rank, x))
        return unmade

    def describe(self, config: Callable[[int], str]) -> str:
        """The verdict as the progress line says it; ``config`` formats a configuration by id."""
        v, retime = self.verdict, self.retime
        owed = sum(self.left.values())
        if v is None and owed:
            return (
                f"confirmation cut short by the stop: {self.made} launches made and kept, {owed} still owed "
                "(the same command makes them and names the winner)"
            )
        if v is None or retime is None:
            return (
                "confirmation: no verdict (a rank's device was lost, or no candidate could be launched; "
                "the next run confirms again)"
            )
        lo_ms, hi_ms = v.ci_ms
        shown = ", ".join(config(i) for i in v.tied[:SHOWN_TIES])
        more = (
            f" and {len(v.tied) - SHOWN_TIES} more (python -m mpitune report lists them)"
            if len(v.tied) > SHOWN_TIES
            else ""
        )
        tied = f", tied with {len(v.tied)}: {shown}{more}" if v.tied else ", no ties"
        most = max((len(share.work) for share in self.shares), default=len(retime.work))
        spread = f", the {ANCHORS} best on every rank and up to {most} a rank" if most < len(retime.work) else ""
        earlier = self.earlier
        finished = f", with run {earlier.run}'s {earlier.made} launches" if earlier is not None and earlier.made else ""
        return (
            f"confirmed best {v.winner_ms:.4g} ms [{lo_ms:.4g}, {hi_ms:.4g}] {config(v.winner)}{tied} "
            f"({len(retime.work)} candidates x {retime.rounds} rounds on {self.ranks} rank(s){spread}{finished})"
        )
