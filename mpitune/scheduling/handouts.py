"""Rank 0's hand-outs: which ranks get work when, how much, and when their reports are told.

Every run hands out work on this one path. Each rank holds the order it measures and at most ``depth
- 1`` more. Once ``quorum`` ranks hold fewer, rank 0 asks the strategy for their chunks, knowing
every report recorded so far. It deals them by predicted cost, the costliest to the rank free first.
A ``Policy`` says how many, how big, and when results are told:

- ``refill`` (the default on several ranks): some ranks make a quorum, chunks shrink towards
  the end (``_size``), and each report is written and told as it arrives. It keeps more ranks
  busy (docs/performance.md, "How work is handed out"), but a rerun need not search the same.
- ``batches``: every rank must want work. A batch's reports are written together, in rank
  order, and told in one call, in the order asked: a seed makes the same search, resumed too.

A resumed run replays what each ask knew (resume.py). The confirmation goes to every rank at once.
In a job of several device models with ``--portable N``, a model whose search ended first holds
its ranks until every model's has, then measures the portable candidates it lacks. No MPI here:
rounds.py moves the orders and the reports.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mpitune.model.problem import DEPTH, Dealing, RunSettings, Schedule
from mpitune.model.result import Scored, in_ask_order
from mpitune.model.work import Launch, Retime, Work
from mpitune.scheduling.batching import deal, deal_as_recorded, deal_by_cost, pipeline_depth
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason


@dataclass(frozen=True)
class Policy:
    """How rank 0 hands out work: what ``dealing`` says (model/problem.py), and the orders a rank
    holds at most (``depth``)."""

    dealing: Dealing
    depth: int

    @classmethod
    def of(cls, settings: RunSettings, ranks: int, batch_size: int, in_turn: bool = False) -> Policy:
        """The settings' ``schedule`` resolved for a run: refill on several ranks unless they say
        ``batches``. ``in_turn``: no rank has compile workers (``Dealing.depth``). On one rank, a
        strategy that names its order in advance has its next hand-out out too, to compile while the
        rank measures. One that learns from every result is asked only once told everything."""
        dealing = Dealing.of(settings.schedule, ranks, batch_size, in_turn)
        refilled = dealing.schedule is Schedule.REFILL
        return cls(dealing, dealing.depth if refilled or dealing.per_rank > 1 else pipeline_depth(ranks))

    @property
    def whole(self) -> bool:
        """Whether a hand-out is written and told once all its reports are in (batches)."""
        return self.dealing.schedule is Schedule.BATCHES

    def demand(self, left: int, ranks: int) -> tuple[int, int]:
        """Orders a rank may hold, and the quorum, with ``left`` configurations still to hand out.
        At a refilled run's end, a second order queued behind a long one is what the others would
        wait for. So a rank then gets work only once it holds none, as soon as it does."""
        if not self.whole and left < self.depth * ranks:
            return 1, 1
        return self.depth, self.dealing.quorum


@dataclass(frozen=True)
class Recorded:
    """What one report gave: the results to tell the strategy in one call, and whether it completed
    its hand-out. A whole hand-out tells nothing until its other reports are in."""

    told: list[Scored]
    completed: bool


@dataclass
class _Calibration:
    """A reference every rank times once, each with its next order: its launches by rank."""

    batch: int
    retime: Retime
    to_send: set[int]
    launches: dict[int, tuple[Launch, ...]] = field(default_factory=dict)


class Handouts:
    """Rank 0's hand-outs and the reports they come back as. Main thread only."""

    def __init__(self, manager: Manager):
        self.manager = manager
        self.ranks = manager.ranks
        self.policy = Policy.of(manager.settings, self.ranks, manager.batch_size, manager.compiles_in_turn)
        self.held: list[deque[int]] = [deque() for _ in range(self.ranks)]  # each rank's hand-outs, oldest first
        self.waiting: dict[int, set[int]] = {}  # by hand-out: the ranks whose report has not come
        self.started_s = np.zeros(self.ranks)  # when each rank started the order it measures (rank 0's clock)
        self.told_rows = 0  # results rows recorded (and told) in this run
        self.config_s: deque[float] = deque(maxlen=4 * self.ranks)  # recent seconds per configuration
        self._reports: dict[int, dict[int, Report]] = {}  # by hand-out, a whole one's reports so far
        self._calibration: _Calibration | None = None
        self.holding = False  # the ranks hold while the job's other device models search

    @property
    def busy(self) -> bool:
        return any(self.held)

    def hand_outs(self) -> list[dict[int, Order]]:
        """The orders to send now, by rank, one dict per hand-out. These are chunks for the ranks
        that want work (once enough do), the confirmation once the search's hand-outs are recorded,
        or the order to stop, which goes out once."""
        manager = self.manager
        out: list[dict[int, Order]] = []
        while not manager.stop_sent:
            manager.tell_held(self.policy.depth if self.policy.whole else None)
            if manager.poll_stop() is None:
                depth, quorum = self.policy.demand(self._left(), self.ranks)
                wanting = [r for r in range(self.ranks) if len(self.held[r]) < depth]
                if not wanting or (self.busy and len(wanting) < quorum):
                    break
                orders = self._search(wanting)
                if orders:
                    out.append(orders)
                    continue
                if manager.stop_reason is None:
                    break
            now_s = manager.clock.now()
            lacking = manager.portable_lacking()
            if lacking is None:  # the other device models still search
                if not self.holding and self.ranks > 1:
                    out.append({rank: Order(now_s, hold=True) for rank in range(1, self.ranks)})
                self.holding = True
                break
            self.holding = False
            if lacking:
                orders = self._portable(lacking, now_s)
                if orders:  # else a spec's callable failed on one: the run stops (``spec_error``)
                    out.append(orders)
                continue
            last = manager.end_orders(now_s)
            if last is None:
                break  # the confirmation waits for the search's last reports
            if last[0].stop is None:
                self._hold(manager.batch, range(self.ranks), now_s)
            out.append(dict(enumerate(last)))
        return out

    def _search(self, wanting: list[int]) -> dict[int, Order] | None:
        """A chunk for each rank in ``wanting``. None once the search stops (the manager's
        ``stop_reason`` says why), a spec's callable fails, or no rank can end a chunk within the
        time limit while some are busy."""
        manager = self.manager
        now_s = manager.clock.now()
        left = self._left()
        if manager.settings.max_fevals is not None and left <= 0:
            manager.end_search(StopReason.MAX_FEVALS)
            return None
        n, size = self._size(left, len(wanting))
        if (last := self._last(left, now_s)) is not None:
            wanting, n = list(range(self.ranks)), left
        if manager.settings.time_limit_s is not None:
            wanting, n = self._within(manager.settings.time_limit_s - now_s, wanting, n, size, now_s)
            if not wanting:
                if not self.busy:
                    manager.end_search(StopReason.TIME_LIMIT)
                return None
        ids = manager.ask(n)
        if not ids:
            return None
        dealt = last if last is not None and sorted(last) == sorted(ids) else ids
        chunks = self._deal(dealt, wanting, manager.batch + 1, now_s)
        work = manager.hand_out(ids, n, chunks, self.told_rows)
        if work is None:
            return None
        batch = manager.batch
        self._calibrate(batch, now_s, work)
        handed = [r for r, chunk in enumerate(chunks) if chunk]
        orders = {
            rank: Order(
                now_s,
                batch,
                tuple(work[i] for i in chunks[rank]),
                race=manager.calibrating.race_of(manager.race, rank),
                calibrate=self._reference_for(rank),
            )
            for rank in handed
        }
        self._hold(batch, handed, now_s)
        return orders

    def _portable(self, ids: list[int], now_s: float) -> dict[int, Order]:
        """The portable candidates this model lacks, dealt over its ranks: verified and timed in
        full, not raced, since their times here are what the models are compared by."""
        manager = self.manager
        chunks = deal(ids, self.ranks, manager.batch + 1)
        work = manager.hand_out(ids, len(ids), chunks, self.told_rows, untold=True)
        if work is None:
            return {}
        handed = [r for r, chunk in enumerate(chunks) if chunk]
        self._hold(manager.batch, handed, now_s)
        return {rank: Order(now_s, manager.batch, tuple(work[i] for i in chunks[rank])) for rank in handed}

    def _left(self) -> int:
        """Configurations the search may still hand out: the space's unmeasured, within the budget."""
        manager = self.manager
        left = len(manager.space) - manager.known - manager.handed_out
        if manager.settings.max_fevals is not None:
            left = min(left, manager.settings.max_fevals - manager.handed_out)
        return left

    def _size(self, left: int, wanting: int) -> tuple[int, int]:
        """Configurations in the next hand-out to ``wanting`` ranks, and per rank. One per rank
        while no cost is known; then a batch's size, or a refilled ``per_rank`` that shrinks towards
        the end so that the last chunks end together (guided self-scheduling over ``DEPTH`` orders a
        rank), in predicted seconds too: consecutive costly configurations go to several ranks."""
        costs = self.manager.costs
        costs_known = costs is None or costs.learned > 0
        if self.policy.whole:
            n = min(left, self.manager.batching.next_size(None, costs_known))
            return n, math.ceil(n / self.ranks)
        if not costs_known:
            return min(left, wanting), 1
        size = max(1, min(self.policy.dealing.per_rank, math.ceil(left / (DEPTH * self.ranks))))
        n = min(left, wanting * size)
        ahead = self._ahead(n)
        if ahead is not None and self.config_s:
            within_s = wanting * left * float(np.median(self.config_s)) / (DEPTH * self.ranks)
            n = max(min(n, wanting), int(np.sum(np.cumsum(ahead[1]) <= within_s)))
        return n, size

    def _last(self, left: int, now_s: float) -> list[int] | None:
        """The rest of the search, costliest first, dealt to every rank at once: longest first.
        Pulled in order, a costly configuration near the end starts last, and every rank waits for
        it. So the rest goes out once its costliest takes twice what is left a rank, and twice its
        median. None before that, under a time limit, and where its order or costs are not known."""
        if self.policy.whole or self.manager.settings.time_limit_s is not None or not 2 <= left < DEPTH * self.ranks:
            return None  # batches; a rest that a time limit may cut; not yet the end
        if (ahead := self._ahead(left)) is None:
            return None
        ids, cost_s = ahead
        most_s = float(np.max(cost_s)) / 2
        if most_s < max(float(np.median(cost_s)), float(np.sum(cost_s)) / self.ranks):
            return None  # what each rank holds only adds: known without predicting it
        if most_s * self.ranks < float(np.sum(cost_s)) + sum(self._busy_s(rank, now_s) for rank in range(self.ranks)):
            return None
        return [ids[i] for i in np.argsort(-cost_s, kind="stable").tolist()]

    def _ahead(self, n: int) -> tuple[list[int], np.ndarray] | None:
        """The next ``n`` ids at most and their predicted seconds, where both are known; else None."""
        costs = self.manager.costs
        upcoming = self.manager.strategy.upcoming(n) if costs is not None and costs.learned else []
        cost_s = costs.predict_s(upcoming) if costs is not None and upcoming else None
        return None if cost_s is None else (upcoming, cost_s)

    def _within(self, left_s: float, wanting: list[int], n: int, size: int, now_s: float) -> tuple[list[int], int]:
        """The time limit's rule: the ranks of ``wanting`` that can end a configuration within
        ``left_s``, after the orders they hold, and how many of the ``n`` they can end (``size`` a
        rank at most). A configuration takes what one took lately. A hand-out shrinks to fit the
        time left, and none goes out that would end after it."""
        typical_s = self._typical_config_s(n)
        if typical_s <= 0:
            return wanting, n
        costs = self.manager.costs
        fits = {}
        for rank in wanting:
            ahead_s = self._busy_s(rank, now_s) if costs is not None and costs.learned else 0.0
            ahead_s = max(ahead_s, len(self.held[rank]) * typical_s)
            fit = min(size, math.floor((left_s - ahead_s) / typical_s + 1e-9))
            if fit >= 1:
                fits[rank] = fit
        return list(fits), min(n, sum(fits.values()))

    def _hold(self, batch: int, ranks: range | list[int], now_s: float) -> None:
        for rank in ranks:
            if not self.held[rank]:
                self.started_s[rank] = now_s
            self.held[rank].append(batch)
        self.waiting[batch] = set(ranks)

    def _deal(self, ids: list[int], wanting: list[int], batch: int, now_s: float) -> list[list[int]]:
        """One chunk per rank, empty for the ranks not wanting work. As the replayed run dealt it
        where the ranks that measured these then want work now (``deal_as_recorded``); else by
        predicted cost (``deal_by_cost``); else interleaved (``deal``)."""
        manager = self.manager
        replay = manager.setup.problem.kernel.replay
        recorded = deal_as_recorded(ids, self.ranks, manager.space, replay.run if replay else None)
        if recorded is not None and all(not chunk or rank in wanting for rank, chunk in enumerate(recorded)):
            return recorded
        chunks: list[list[int]] = [[] for _ in range(self.ranks)]
        cost_s = manager.costs.predict_s(ids) if manager.costs is not None and manager.costs.learned else None
        if cost_s is None:
            dealt = deal(ids, len(wanting), batch)
        else:
            dealt = deal_by_cost(ids, cost_s, len(wanting), [self._busy_s(rank, now_s) for rank in wanting])
        for place, chunk in enumerate(dealt):
            chunks[wanting[place]] = chunk
        return chunks

    def _busy_s(self, rank: int, now_s: float) -> float:
        """Predicted seconds until ``rank`` is done with what it holds."""
        manager = self.manager
        assert manager.costs is not None
        left_s = 0.0
        for k, batch in enumerate(self.held[rank]):
            chunks = manager.in_flight[batch].chunks
            cost = manager.costs.predict_s(chunks[rank]) if chunks and chunks[rank] else None
            chunk_s = float(np.sum(cost)) if cost is not None else 0.0
            left_s += max(0.0, self.started_s[rank] + chunk_s - now_s) if k == 0 else chunk_s
        return left_s

    def _typical_config_s(self, n: int) -> float:
        """Seconds a configuration took lately on a rank: what one more order will take. Before this
        run's first report, what the next ``n`` are predicted to take (a resumed run's cost model
        and a strategy that names them in advance). Else 0: nothing is known."""
        if self.config_s:
            return float(np.median(self.config_s))
        ahead = self._ahead(n)
        return float(np.median(ahead[1])) if ahead is not None else 0.0

    def _calibrate(self, batch: int, now_s: float, work: dict[int, Work]) -> None:
        """Start a calibration when one is due and none is under way. The reference goes to each
        rank with its next order."""
        manager = self.manager
        if self._calibration is not None:
            return
        retime = manager.calibrating.reference(batch, now_s, manager.best, lambda i: manager.work([i], work)[i])
        if retime is not None:
            self._calibration = _Calibration(batch, retime, set(range(self.ranks)))

    def _reference_for(self, rank: int) -> Retime | None:
        """The reference under way, for a rank that has not been sent it yet."""
        if self._calibration is None or rank not in self._calibration.to_send:
            return None
        self._calibration.to_send.discard(rank)
        return self._calibration.retime

    def record(self, rank: int, report: Report) -> Recorded:
        """``rank``'s report of the oldest order it holds, written to the file at once. In a whole
        hand-out (batches, the confirmation) it waits for the rest, and is written with them."""
        manager = self.manager
        batch = self.held[rank].popleft()
        self.started_s[rank] = report.now_s
        waiting = self.waiting[batch]
        waiting.discard(rank)
        confirming = manager.in_flight[batch].retime is not None
        if not (confirming or self.policy.whole):
            told = self._write(batch, rank, report)
        else:
            self._reports.setdefault(batch, {})[rank] = report
            if waiting:
                return Recorded([], False)
            reports = self._reports.pop(batch)
            if confirming:
                del self.waiting[batch]
                manager.record_confirmation(batch, [reports[r] for r in range(self.ranks)])
                return Recorded([], True)
            written = [self._write(batch, r, reports[r]) for r in sorted(reports)]
            # One tell, in the order asked: how the batch was dealt changes nothing the strategy sees.
            told = in_ask_order([r for rows in written for r in rows], manager.in_flight[batch].work)
        if not waiting:
            del self.waiting[batch]
            manager.complete(batch)
        return Recorded(told, not waiting)

    def flush(self) -> None:
        """Write the reports of whole hand-outs that will not complete (ranks fell silent). They are
        measured work; what did not come stays in flight in the file."""
        for batch, reports in sorted(self._reports.items()):
            if self.manager.in_flight[batch].retime is None:
                for rank in sorted(reports):
                    self._write(batch, rank, reports[rank])
        self._reports.clear()

    def _write(self, batch: int, rank: int, report: Report) -> list[Scored]:
        """One search report into the file; its results scored in calibrated time, to tell."""
        manager = self.manager
        manager.lost_devices([(rank, report)])
        self._learn_calibration(rank, report)
        told = manager.write(batch, rank, report)
        self.told_rows += len(report.results)
        self.config_s.extend(r.finished_s - r.started_s for r in report.results)
        return told

    def _learn_calibration(self, rank: int, report: Report) -> None:
        """Keep a rank's launches of the reference; once every rank's are in, learn from them."""
        calibration = self._calibration
        if calibration is None or not report.calibration:
            return
        calibration.launches[rank] = report.calibration
        if len(calibration.launches) == self.ranks:
            reports = [Report((), (), math.nan, calibration=calibration.launches[r]) for r in range(self.ranks)]
            self.manager.record_calibration(calibration.batch, reports)
            self._calibration = None
