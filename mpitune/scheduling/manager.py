"""Rank 0's side of the loop: budget, batching, strategy, cache and the progress a person reads.

The Manager never talks to other ranks: the loop hands it the ranks' reports and sends out
the orders it makes, so that it can be driven in one process (tests, benchmarks).
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from mpitune import strategies
from mpitune.model.racing import Race
from mpitune.model.result import Result, Scored
from mpitune.model.timeline import Clock
from mpitune.model.work import Work
from mpitune.scheduling.batching import Batching, busy_s, deal, deal_as_recorded, deal_by_cost, pipeline_depth
from mpitune.scheduling.costs import CostModel
from mpitune.scheduling.devices.calibrating import Calibrating
from mpitune.scheduling.devices.confirming import Confirming
from mpitune.scheduling.devices.leaders import Leaders
from mpitune.scheduling.flight import Flight, Setup
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.resume import priors_changed, rebuild, strategy_key
from mpitune.store.cache import Cache
from mpitune.strategies.base import Strategy

log = logging.getLogger(__name__)

TYPICAL_BATCHES = 5  # the last batches whose median predicts the next one's duration


class Manager:
    """Hands out batches until the strategy is done or the budget is spent, and records what comes back."""

    def __init__(self, setup: Setup, cache: Cache, hosts: tuple[str, ...], devices: tuple[str, ...], clock: Clock):
        self.setup, self.cache, self.clock = setup, cache, clock
        self.space, self.strategy, self.settings = setup.space, setup.strategy, setup.settings
        self.hosts, self.devices = hosts, devices
        self.objective = cache.objective
        self.ranks = len(hosts)
        self.batching = Batching.of(self.ranks, self.strategy, setup.settings.batch_size)
        self.depth = pipeline_depth(self.ranks)
        extras = setup.problem.extras
        self._derive = extras.derive if extras is not None and extras.varies else None
        self.handed_out = 0
        self.measured = 0
        self.batch = -1  # the last batch handed out
        self.recorded_batch = -1  # the last batch recorded
        self.stop_reason: StopReason | None = None
        self.error = ""  # why a spec's callable stopped the run
        self.in_flight: dict[int, Flight] = {}  # by batch, oldest first: handed out, not yet recorded
        self.unmeasured: set[int] = set()  # handed out, never measured (see save_strategy)
        self.stop_requested: StopReason | None = None  # set from outside: a signal, a lost device
        self.stop_sent = False  # the order to stop went out: nothing more is handed out
        self.batch_s: list[float] = []  # what each recorded batch took, from its start on the ranks
        self._recorded_s = math.nan  # when the last batch was recorded
        self._reported_s: list[float] | None = None  # when each rank reported its chunk of it
        known = [self.objective.evaluate(r, self.space.config(r.config_id)) for r in cache.recorded()]
        cache.rewrite_metrics(known)  # metrics are derived: this run's definitions hold for every row
        self.known = len(known)
        self.best: Scored | None = None
        self.update_best(known)
        # Dealing by cost evens out chunks of several configurations, and on several ranks it
        # gives the costliest configurations to the ranks that will be free first (batching.busy_s);
        # one rank with one configuration per batch has nothing to deal.
        self.costs = CostModel(self.space) if self.batching.size > 1 else None
        if self.costs is not None:
            self.costs.learn(known)
        self._planned: tuple[list[int], list[list[int]]] | None = None  # the upcoming ids, as dealt by cost
        self._upcoming: dict[int, Work] = {}  # the configurations of the upcoming batch, made once
        self.race = self._start_race(known)
        confirmed = setup.problem.replay_run.confirmed if setup.problem.replay_run else frozenset()  # as replayed
        self.confirming = Confirming(self.settings.confirm, self.ranks, self.objective.is_kernel_time, cache, confirmed)
        self.leaders = Leaders()  # as measured; calibration may reorder them, confirmation picks from them
        self.leaders.add(known)
        self.calibrating = Calibrating(
            self.ranks,
            self.settings.calibrate and self.objective.is_kernel_time,
            self.settings.device_margin,
            self.settings.seed,
        )
        self.confirmed_last = False  # the last batch recorded was the confirmation
        self._held: deque[list[Scored]] = deque()  # recorded, told as batches go out (resume.rebuild)
        self._resume_strategy(known)

    @property
    def batch_size(self) -> int:
        return self.batching.size

    def _strategy_key(self) -> str:
        return strategy_key(self.settings, self.objective.key(), self.setup.prior)

    def _resume_strategy(self, known: list[Scored]) -> None:
        """Continue the search of the runs before (population, RNG, ...), if they ran the same
        strategy with the same seed, options and priors, by replaying their recorded asks and
        tells into a fresh strategy (resume.py); else start afresh knowing the cache."""
        settings, prior, history = self.settings, self.setup.prior, self.cache.history()

        def fresh() -> Strategy:
            return strategies.create(settings.strategy, self.space, settings.seed, settings.strategy_options, prior)

        self.strategy, held = rebuild(fresh, history, known, self._strategy_key(), settings.strategy)
        self._held.extend(held)
        changed = priors_changed(history, prior) if known else None
        if changed:
            log.warning("%s", changed)

    def save_strategy(self) -> None:
        """Record that this run's search ended cleanly, for a resumed run to continue it, unless
        configurations it handed out came back unmeasured (a rank lost its device mid-chunk): the
        strategy counts them as seen and would never propose them again, so a resumed run starts
        it afresh from the cache. A batch still in flight at the end (a rank stopped answering)
        came back unmeasured too."""
        self.cache.end_search(self._strategy_key(), continuable=not self.unmeasured and not self.in_flight)

    def fill(self) -> list[list[Order]]:
        """The batches to send now, oldest first: as many as keep ``depth`` batches in flight,
        the last possibly the order to stop, which goes out once; the ranks carry out their
        orders in turn, so a stop reaches each after the chunks it already holds."""
        batches = []
        while not self.stop_sent:
            if len(self.in_flight) + len(self._held) >= self.depth:
                if not self._held:
                    break
                self.tell_held(1)
                continue
            orders = self.next_orders()
            if orders is None:
                break  # the confirmation waits for the search's last batches
            batches.append(orders)
            if orders[0].stop is not None:
                self.stop_sent = True
            else:
                self.in_flight[self.batch].orders = orders
        return batches

    def tell_held(self, batches: int | None = None) -> None:
        """Tell the strategy the first ``batches`` (None: all) of what the last run had in flight
        when it stopped, which an uninterrupted run would have told by now (resume.rebuild)."""
        while self._held and (batches is None or batches > 0):
            self.strategy.tell(self._held.popleft())
            batches = None if batches is None else batches - 1

    def next_orders(self) -> list[Order] | None:
        """What every rank does after the batches in flight: a chunk of config ids each, the
        confirmation once the search has ended and its batches are recorded (None until then),
        or stop."""
        now_s = self.clock.now()
        if self.poll_stop() is None:
            orders = self._search_orders(now_s)
            if orders is not None:
                return orders
        return self.end_orders(now_s)

    def poll_stop(self) -> StopReason | None:
        """Why the search has stopped, if it has: a stop asked for from outside (a signal, the
        stop file, a lost device or file) becomes the reason, else the reason the search gave."""
        if self.stop_requested is None and self.settings.stop_file and os.path.exists(self.settings.stop_file):
            self.stop_requested = StopReason.SIGNAL
            log.warning("found %s: finishing, then stopping", self.settings.stop_file)
        self.notice_loss()
        if self.stop_requested is not None:
            self.stop_reason = self.stop_requested
        return self.stop_reason

    def end_orders(self, now_s: float) -> list[Order] | None:
        """Once the search has stopped: the confirmation for every rank once the search's
        batches are recorded (None until then), or stop."""
        assert self.stop_reason is not None
        if self.stop_requested is None and self.confirming.wanted:
            if self.in_flight:
                return None
            leaders = [self.calibrating.raced(r) for r in self.leaders.results]
            work, sds = (lambda i: self.work(i, {})), self.calibrating.factor_sd()
            orders = self.confirming.orders(self.stop_reason, now_s, self.batch + 1, leaders, work, sds)
            if orders is not None:
                self.batch += 1
                self.in_flight[self.batch] = Flight({}, now_s, retime=self.confirming.retime)
                return orders
        return [Order(now_s, stop=self.stop_reason)] * self.ranks

    def _search_orders(self, now_s: float) -> list[Order] | None:
        """The search's next batch; None once it has stopped (``stop_reason`` says why)."""
        time_limit_s = self.settings.time_limit_s
        n = self._next_size()
        if self.settings.max_fevals is not None and n <= 0:
            self.stop_reason = StopReason.MAX_FEVALS
        elif time_limit_s is not None and (n := self._within_time(n, time_limit_s - now_s)) <= 0:
            self.stop_reason = StopReason.TIME_LIMIT
        else:
            ids = self.strategy.ask(n)
            if not ids:
                self.stop_reason = StopReason.FINISHED
            else:
                return self._hand_out(ids, n, now_s)
        return None

    def _hand_out(self, ids: list[int], requested: int, now_s: float) -> list[Order] | None:
        """The orders of one batch (``ids``, what the strategy answered when asked for
        ``requested``), recorded in the file as in flight and as asked; None (and a spec_error
        stop) if a spec's callable fails on one of its configurations."""
        self.handed_out += len(ids)
        self.batch += 1
        chunks = self._deal(ids, self.batch)
        self.cache.hand_out(self.batch, chunks, requested, ids)
        self.notice_loss()
        try:
            work = self.work(ids, self._upcoming)
            self.in_flight[self.batch] = Flight(work, now_s, chunks)
            # The batch after this one: asked at once while fewer than ``depth`` are in flight,
            # else once this one's results (and costs) are in.
            upcoming_ids = self.strategy.upcoming(self._next_size(None if len(self.in_flight) < self.depth else True))
            upcoming = self._deal(upcoming_ids, self.batch + 1)
            self._planned = (upcoming_ids, upcoming) if self.costs is not None and self.costs.learned else None
            self._upcoming = self.work(upcoming_ids, work)
        except ValueError as exc:
            self.stop_reason, self.error = StopReason.SPEC_ERROR, f"{self.setup.problem.spec_path}: {exc}"
            self.in_flight.pop(self.batch, None)
            self.unmeasured |= set(ids)  # never sent
            return None
        calibrate = self.calibrating.reference(self.batch, now_s, self.best, lambda i: self.work([i], work)[i])
        return [
            Order(
                now_s,
                self.batch,
                tuple(work[i] for i in chunk),
                upcoming=tuple(self._upcoming[i] for i in next_chunk),
                race=self.calibrating.race_of(self.race, rank),
                calibrate=calibrate,
            )
            for rank, (chunk, next_chunk) in enumerate(zip(chunks, upcoming))
        ]

    def work(self, ids: list[int], made: dict[int, Work]) -> dict[int, Work]:
        """Each id as a configuration with what the spec's per-configuration callables give for
        it (ValueError if one fails); one already ``made`` (as the upcoming batch) is reused."""
        work = {}
        for i in ids:
            if i in made:
                work[i] = made[i]
            else:
                config = self.space.config(i)
                work[i] = Work(i, config, self._derive(config) if self._derive is not None else None)
        return work

    def _deal(self, ids: list[int], batch: int) -> list[list[int]]:
        """One chunk per rank: as this batch was dealt by cost when it was the upcoming one (its
        chunks are being compiled ahead on those ranks), else by predicted cost and what each
        rank still has to do before it, else (nothing measured yet) interleaved. An upcoming
        batch dealt blind is dealt again by cost: its compiling ahead is lost once, but it
        would be the largest batch of the run dealt knowing nothing (46 % of the gemm cache's
        configurations on 256 ranks). A replay of a run on as many ranks deals as the run did."""
        if self._planned is not None and self._planned[0] == ids:
            return self._planned[1]
        if (recorded := deal_as_recorded(ids, self.ranks, self.space, self.setup.problem.replay_run)) is not None:
            return recorded
        cost_s = None if self.costs is None or not ids else self.costs.predict_s(ids)
        if cost_s is None:
            return deal(ids, self.ranks, batch)
        return deal_by_cost(ids, cost_s, self.ranks, self._busy_s(batch))

    def _busy_s(self, batch: int) -> np.ndarray:
        """Predicted seconds until each rank can start ``batch``, after the oldest batch in flight."""
        assert self.costs is not None
        now_s = self.clock.now()
        oldest = next((f for b, f in self.in_flight.items() if b < batch and f.ids), None)
        if oldest is None:
            return busy_s(self.ranks, now_s, self._reported_s, now_s, None)
        return busy_s(self.ranks, now_s, self._reported_s, oldest.handed_s, self.costs.chunks_s(oldest.chunks))

    def _next_size(self, costs_known: bool | None = None) -> int:
        limit = self.settings.max_fevals
        if costs_known is None:
            costs_known = self.costs is None or self.costs.learned > 0
        return self.batching.next_size(None if limit is None else limit - self.handed_out, costs_known)

    def _within_time(self, n: int, left_s: float) -> int:
        """How many of the next ``n`` configurations a batch may hold to end within ``left_s``,
        after the batches still in flight: by their predicted costs where the strategy names
        them in advance (the ranks sharing them evenly), so that a batch shrinks to fit the
        time left; else all of them if a typical batch fits after those in flight, none if
        not. The first batch of a guided search is short, so its duration says little about
        the next."""
        upcoming = self.strategy.upcoming(n) if self.costs is not None else []
        cost_s = self.costs.predict_s(upcoming) if self.costs is not None and upcoming else None
        if cost_s is None:
            return n if (1 + len(self.in_flight)) * self._typical_batch_s() <= left_s else 0
        per_rank_s = np.cumsum(cost_s) / self.ranks
        left_s -= sum(self._per_rank_s(list(f.ids)) for f in self.in_flight.values())
        return min(n, int(np.searchsorted(per_rank_s, left_s, side="right")))

    def _per_rank_s(self, ids: list[int]) -> float:
        """A batch's predicted seconds per rank, 0 where nothing predicts them."""
        cost_s = self.costs.predict_s(ids) if self.costs is not None else None
        return 0.0 if cost_s is None else float(np.sum(cost_s)) / self.ranks

    def _typical_batch_s(self) -> float:
        """How long the next batch will likely take: the median of the last few."""
        return float(np.median(self.batch_s[-TYPICAL_BATCHES:])) if self.batch_s else 0.0

    def record(self, reports: Sequence[Report]) -> list[Scored]:
        """Write the reports of the oldest batch in flight (one per rank, in rank order) to the
        file; the results, scored.

        A rank whose device was lost stops the run after this batch (``device_error``), also
        when the order to stop had gone out for another reason."""
        batch, flight = next(iter(self.in_flight.items()))
        del self.in_flight[batch]
        self.recorded_batch = batch
        now_s = self.clock.now()
        started_s = flight.handed_s if math.isnan(self._recorded_s) else max(flight.handed_s, self._recorded_s)
        self.batch_s.append(now_s - started_s)
        self._recorded_s = now_s
        self._reported_s = [report.now_s for report in reports] if len(reports) == self.ranks else None
        lost = self.lost_devices(enumerate(reports))
        phases = [(rank, p) for rank, report in enumerate(reports) for p in report.phases]
        if flight.retime is not None:
            whole = len(reports) == self.ranks and not lost and self.stop_requested is None
            self.confirming.record(reports, now_s, whole, self.settings.seed, self.settings.device_margin)
            self.confirmed_last = True
            self.cache.append_phases(phases)
            return []
        self.calibrated(batch, reports)
        scored = self.score(flight, [r for report in reports for r in report.results])
        self.cache.append(scored, phases, done_batch=batch)
        return self.counted(scored, flight.ids)

    def calibrated(self, batch: int, reports: Sequence[Report]) -> None:
        """Learn from, and record, the reference's launches in ``reports`` (one per rank)."""
        calibration = [(rank, x) for rank, report in enumerate(reports) for x in report.calibration]
        estimate = self.calibrating.record(reports)
        self.cache.append_calibration(batch, calibration, estimate)
        if estimate:  # the factors changed: the best so far is judged again by them
            self.best = None
            self.update_best([self.calibrating.scored(r) for r in self.leaders.results])

    def lost_devices(self, reports: Iterable[tuple[int, Report]]) -> bool:
        """Whether a rank reported its device lost: the run then stops after what is in flight
        (``device_error``), also when the order to stop had gone out for another reason."""
        lost = [(rank, report.fatal_error) for rank, report in reports if report.fatal_error]
        if lost:
            rank, fatal = lost[0]
            log.error("rank %d (%s): %s", rank, self.hosts[rank], fatal)
            self.stop_requested = StopReason.DEVICE_ERROR
            if self.stop_reason is not None:
                self.stop_reason = StopReason.DEVICE_ERROR
        return bool(lost)

    def score(self, flight: Flight, results: Iterable[Result]) -> list[Scored]:
        return [self.objective.evaluate(r, flight.work[r.config_id].config) for r in results]

    def counted(self, scored: list[Scored], handed: set[int]) -> list[Scored]:
        """``scored``, just written, counted as measured (of the ``handed`` ids, those missing
        as unmeasured) and in calibrated time, for ``tell``."""
        self.notice_loss()
        self.measured += len(scored)
        self.unmeasured |= handed - {r.config_id for r in scored}
        return [self.calibrating.scored(s) for s in scored]

    def notice_loss(self) -> None:
        """The file was lost to other hands by the last write: it goes on beside the path
        (store/custody.py), and the run stops as for a signal, finishing what the ranks hold."""
        if self.stop_requested is None and self.cache.lost is not None:
            self.stop_requested = StopReason.FILE_LOST

    def tell(self, results: list[Scored]) -> None:
        """``results`` as ``record`` gave them: scored in calibrated time (devices/calibrating.py)."""
        self.leaders.add(results)
        self.calibrating.seen(results)
        self.strategy.tell(results)
        if self.costs is not None:
            self.costs.learn(results)
        self.update_best(results)
        if self.race is not None:
            self.race = self.race.seen([self.calibrating.raced(r) for r in results])

    def _start_race(self, known: list[Scored]) -> Race | None:
        """What the ranks race against, from what the file already holds; None when racing is off.
        Only the kernel time can be raced: a metric is the spec's function, evaluated on rank 0
        alone and not necessarily monotonic in time (GFLOP/s of work that depends on the
        configuration), and an observed value (energy) is not what the launches time."""
        if not self.settings.racing:
            return None
        if not self.objective.is_kernel_time:
            log.info("racing is off: the objective is %s, not the kernel time", ", ".join(self.objective.names))
            return None
        return Race(rule=self.settings.race_rule).seen(known)

    def update_best(self, results: list[Scored]) -> None:
        for r in results:
            if math.isfinite(r.score) and (self.best is None or r.score < self.best.score):
                self.best = r
