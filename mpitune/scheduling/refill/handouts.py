"""Rank 0's hand-outs without batches: each rank is refilled as it frees up (``Schedule.REFILL``).

With batches (``Manager.fill``), every rank gets one chunk of each batch and batch b goes out
once batch b - 2 is recorded: a rank that finishes its chunks early waits for the slowest rank
of the batch before, and the strategy learns batch by batch. Here each rank holds the order it
is measuring and at most one more (``DEPTH``); whenever enough ranks (``quorum``) hold no next
one, rank 0 asks the strategy for that many chunks, knowing every report recorded so far, and
deals them by predicted cost, the costliest to the rank predicted to be free first. Each report
is recorded and told as it arrives. Replaying the default strategy's searches of 400
evaluations on 8 ranks with the scheduler itself, this cut the wall from 0.180 and 0.186 of one
rank's (batches) to 0.148 and 0.149, with the same scores; brute force keeps 256 replayed ranks
95.0 % busy, against 85.8 % (docs/performance.md, "Refill").

What it costs: which results the strategy knew at each ask depends on when the reports came,
so a rerun with the same seed need not make the same search; the file records, for each ask,
how many results rows had been told before it, so that a resumed run rebuilds the strategy
(resume.py). A hand-out keeps the file's unit, the batch (its ids asked at once, its chunks
recorded as in flight), but goes to the ranks that want work only. The confirmation, which
interleaves the candidates on every rank, still goes to every rank at once, once the search's
hand-outs are recorded. No MPI here: rank0.py moves the orders and the reports.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mpitune.model.problem import RunSettings, Schedule
from mpitune.model.result import Scored
from mpitune.model.work import Launch, Retime, Work
from mpitune.scheduling.batching import deal_by_cost
from mpitune.scheduling.flight import Flight
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import Order, Report, StopReason

DEPTH = 2  # orders a rank holds: the one it measures and the next, so it never waits for rank 0


def refilled(manager: Manager) -> bool:
    """Whether this run's ranks are refilled rather than dealt batches: only when the settings
    say ``refill`` and there are several ranks. ``auto`` keeps batches until rank 0 can measure
    its own orders beside its hand-outs: while it measures one in its main thread it refills no
    one, and on some spaces (few configurations, a few costly ones) that loses what refilling
    gains (docs/performance.md, "Refill")."""
    return refills(manager.settings, manager.ranks)


def refills(settings: RunSettings, ranks: int) -> bool:
    """``refilled`` from what is known before the run's Manager is: its settings and ranks."""
    return ranks > 1 and settings.schedule is Schedule.REFILL


@dataclass
class Recorded:
    """What one report gave: the results to tell the strategy, and whether it completed its hand-out."""

    told: list[Scored]
    completed: bool


@dataclass
class _Calibration:
    """A reference every rank times once, each with its next order: its launches by rank."""

    batch: int
    retime: Retime
    to_send: set[int]
    launches: dict[int, tuple[Launch, ...]] = field(default_factory=dict)


class Refill:
    """Rank 0's side of a refilled run: the hand-outs to make and the reports to record."""

    def __init__(self, manager: Manager):
        self.manager = manager
        self.ranks = manager.ranks
        self.per_rank = max(1, manager.batch_size // self.ranks)
        # Ranks that must want work before rank 0 hands out: half for a strategy that learns from
        # every result, which it asks for that many at once; an eighth for one that names its
        # order in advance, which learns nothing but whose chunks are dealt by cost among them
        # (brute force on 256 replayed ranks: 91.7 % busy with half, 93.9 % with an eighth).
        self.quorum = max(1, self.ranks // (2 if self.per_rank == 1 else 8))
        self.held: list[deque[int]] = [deque() for _ in range(self.ranks)]  # each rank's hand-outs, oldest first
        self.waiting: dict[int, set[int]] = {}  # by hand-out: the ranks whose report has not come
        self.started_s = np.zeros(self.ranks)  # when each rank started the order it measures (rank 0's clock)
        self.told_rows = 0  # results rows recorded (and told) in this run
        self.completed = 0  # hand-outs whose every rank has reported
        self.config_s: deque[float] = deque(maxlen=4 * self.ranks)  # recent seconds per configuration
        self._confirming: dict[int, Report] = {}
        self._calibration: _Calibration | None = None

    @property
    def busy(self) -> bool:
        return any(self.held)

    def hand_outs(self) -> list[dict[int, Order]]:
        """The orders to send now, by rank, one dict per hand-out: chunks for the ranks that want
        work (once enough do), the confirmation for every rank once the search's hand-outs are
        recorded, or the order to stop for every rank, which goes out once."""
        manager = self.manager
        out: list[dict[int, Order]] = []
        while not manager.stop_sent:
            manager.tell_held()
            if manager.poll_stop() is None:
                # At the end, a rank's second order, queued behind a long one, is what the others
                # would wait for: a rank gets work only once it holds none, as soon as it does.
                end = self._left() < DEPTH * self.ranks
                depth, quorum = (1, 1) if end else (DEPTH, self.quorum)
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
            last = manager.end_orders(now_s)
            if last is None:
                break  # the confirmation waits for the search's last reports
            if last[0].stop is not None:
                manager.stop_sent = True
            else:
                manager.in_flight[manager.batch].orders = last
                self._hold(manager.batch, range(self.ranks), now_s)
            out.append(dict(enumerate(last)))
        return out

    def _search(self, wanting: list[int]) -> dict[int, Order] | None:
        """A chunk for each rank in ``wanting``; None once the search stops (the manager's
        ``stop_reason`` says why) or a spec's callable fails."""
        manager = self.manager
        now_s = manager.clock.now()
        left = self._left()
        size = self._chunk(left)
        if manager.settings.max_fevals is not None and left <= 0:
            manager.stop_reason = StopReason.MAX_FEVALS
            return None
        limit_s = manager.settings.time_limit_s
        if limit_s is not None:  # only ranks whose chunk, after the orders they hold, ends within it
            chunk_s = size * self._typical_config_s()
            wanting = [r for r in wanting if now_s + (len(self.held[r]) + 1) * chunk_s <= limit_s]
            if not wanting:
                if not self.busy:
                    manager.stop_reason = StopReason.TIME_LIMIT
                return None
        n = min(left, len(wanting) * size)
        ids = manager.strategy.ask(n)
        if not ids:
            manager.stop_reason = StopReason.FINISHED
            return None
        manager.handed_out += len(ids)
        manager.batch += 1
        batch = manager.batch
        chunks = self._deal(ids, wanting, now_s)
        manager.cache.hand_out(batch, chunks, n, ids, told=self.told_rows)
        manager.notice_loss()
        try:
            work = manager.work(ids, {})
        except ValueError as exc:
            manager.stop_reason, manager.error = StopReason.SPEC_ERROR, f"{manager.setup.problem.spec_path}: {exc}"
            manager.unmeasured |= set(ids)  # never sent
            return None
        self._calibrate(batch, now_s, work)
        orders = [Order(now_s, batch) for _ in range(self.ranks)]
        for rank, chunk in enumerate(chunks):
            if chunk:
                calibrate = self._reference_for(rank)
                race = manager.calibrating.race_of(manager.race, rank)
                orders[rank] = Order(now_s, batch, tuple(work[i] for i in chunk), race=race, calibrate=calibrate)
        manager.in_flight[batch] = Flight(work, now_s, chunks, orders)
        handed = [r for r, chunk in enumerate(chunks) if chunk]
        self._hold(batch, handed, now_s)
        return {r: orders[r] for r in handed}

    def _left(self) -> int:
        """Configurations the search may still hand out: the space's unmeasured, within the budget."""
        manager = self.manager
        left = len(manager.space) - manager.known - manager.handed_out
        if manager.settings.max_fevals is not None:
            left = min(left, manager.settings.max_fevals - manager.handed_out)
        return left

    def _chunk(self, left: int) -> int:
        """Configurations per rank in the next hand-out: one while no cost is known, so that long
        chunks are dealt by predicted cost, not blind; then ``per_rank``, fewer towards the end,
        so that the last chunks, which nothing can hide behind, end together (guided
        self-scheduling: what is left shared over every rank's two orders)."""
        costs = self.manager.costs
        if costs is not None and not costs.learned:
            return 1
        return max(1, min(self.per_rank, math.ceil(left / (DEPTH * self.ranks))))

    def _hold(self, batch: int, ranks: range | list[int], now_s: float) -> None:
        for rank in ranks:
            if not self.held[rank]:
                self.started_s[rank] = now_s
            self.held[rank].append(batch)
        self.waiting[batch] = set(ranks)

    def _deal(self, ids: list[int], wanting: list[int], now_s: float) -> list[list[int]]:
        """One chunk per rank (empty for the ranks not wanting work): by predicted cost, the
        costliest to the wanting rank predicted to be free first; in turn while nothing
        predicts costs."""
        manager = self.manager
        chunks: list[list[int]] = [[] for _ in range(self.ranks)]
        cost_s = manager.costs.predict_s(ids) if manager.costs is not None and manager.costs.learned else None
        if cost_s is None:
            for k, i in enumerate(ids):
                chunks[wanting[k % len(wanting)]].append(i)
            return chunks
        busy_s = [self._busy_s(rank, now_s) for rank in wanting]
        for place, chunk in enumerate(deal_by_cost(ids, cost_s, len(wanting), busy_s)):
            chunks[wanting[place]] = chunk
        return chunks

    def _busy_s(self, rank: int, now_s: float) -> float:
        """Predicted seconds until ``rank`` is done with what it holds."""
        manager = self.manager
        assert manager.costs is not None
        left_s = 0.0
        for k, batch in enumerate(self.held[rank]):
            chunk = manager.in_flight[batch].chunks[rank] if manager.in_flight[batch].chunks else []
            cost = manager.costs.predict_s(chunk) if chunk else None
            chunk_s = float(np.sum(cost)) if cost is not None else 0.0
            left_s += max(0.0, self.started_s[rank] + chunk_s - now_s) if k == 0 else chunk_s
        return left_s

    def _typical_config_s(self) -> float:
        """Seconds a configuration took lately on a rank: what one more order will take."""
        return float(np.median(self.config_s)) if self.config_s else 0.0

    def _calibrate(self, batch: int, now_s: float, work: dict[int, Work]) -> None:
        """Start a calibration when one is due and none is under way: the reference goes to each
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
        """``rank``'s report of the oldest order it holds, written to the file at once."""
        manager = self.manager
        batch = self.held[rank].popleft()
        flight = manager.in_flight[batch]
        self.started_s[rank] = report.now_s
        waiting = self.waiting[batch]
        waiting.discard(rank)
        if flight.retime is not None:
            self._confirming[rank] = report
            if not waiting:  # the oldest (and only) flight: the manager records it as with batches
                del self.waiting[batch]
                manager.record([self._confirming.pop(r) for r in range(self.ranks)])
            return Recorded([], not waiting)
        manager.lost_devices([(rank, report)])
        self._learn_calibration(rank, report)
        scored = manager.score(flight, report.results)
        manager.cache.append(scored, [(rank, p) for p in report.phases], done_batch=batch, done_rank=rank)
        self.told_rows += len(scored)
        self.config_s.extend(r.finished_s - r.started_s for r in report.results)
        if not waiting:
            self._done(batch)
        return Recorded(manager.counted(scored, set(flight.chunks[rank])), not waiting)

    def _done(self, batch: int) -> None:
        """A hand-out complete: the progress line counts the hand-outs complete so far, which
        (unlike batches) complete in no particular order."""
        del self.manager.in_flight[batch], self.waiting[batch]
        self.completed += 1
        self.manager.recorded_batch = self.completed - 1

    def _learn_calibration(self, rank: int, report: Report) -> None:
        """Keep a rank's launches of the reference; once every rank's are in, learn from them."""
        calibration = self._calibration
        if calibration is None or not report.calibration:
            return
        calibration.launches[rank] = report.calibration
        if len(calibration.launches) == self.ranks:
            reports = [Report((), (), math.nan, calibration=calibration.launches[r]) for r in range(self.ranks)]
            self.manager.calibrated(calibration.batch, reports)
            self._calibration = None
