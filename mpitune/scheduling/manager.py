"""Rank 0's search: budget, strategy, cache, hand-outs in flight, and the progress lines.

The Manager never talks to other ranks (handouts.py deals, rounds.py moves the messages), so it can
be driven in one process. Its state is its own: other modules read its fields and change them only
through its methods, each saying which thread may call it (tests/scheduling/test_manager_boundary.py
checks). Rank 0's main thread makes every change but one: a signal handler or the heartbeat thread
may *request* a stop.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mpitune import strategies
from mpitune.model.judging.racing import Race
from mpitune.model.prior import Prior
from mpitune.model.problem import Problem, RunSettings, Schedule
from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock
from mpitune.model.work import Retime, Work
from mpitune.scheduling.batching import Batching
from mpitune.scheduling.costs import CostModel
from mpitune.scheduling.devices.calibrating import Calibrating
from mpitune.scheduling.devices.confirming import CONFIRMABLE, Confirming
from mpitune.scheduling.devices.leaders import Leaders
from mpitune.scheduling.messages import Order, Report, StopReason
from mpitune.scheduling.resume import priors_changed, rebuild, strategy_key
from mpitune.store.cache import Cache
from mpitune.strategies.base import Strategy

if TYPE_CHECKING:  # the leaders' sharing goes through MPI, which the Manager never calls itself
    from mpitune.scheduling.devices.models import Peers

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """What rank 0 alone holds: the validated spec, the space and the strategy."""

    problem: Problem
    settings: RunSettings
    space: SearchSpace
    strategy: Strategy
    prior: Prior | None = None  # what the strategy started from (model/prior.py)


@dataclass
class Flight:
    """One hand-out not yet recorded: its configurations by id, which score the results that come
    back, and its chunks, rank by rank."""

    work: dict[int, Work]
    chunks: list[list[int]] = field(default_factory=list)
    retime: Retime | None = None  # the confirmation instead of a hand-out of the search
    untold: bool = False  # the portable candidates this model lacked: measured, not for the search


class Manager:
    """Hands out configurations until the strategy is done or the budget is spent, and records what
    comes back."""

    def __init__(
        self,
        setup: Setup,
        cache: Cache,
        hosts: tuple[str, ...],
        devices: tuple[str, ...],
        clock: Clock,
        cost_model: Callable[[SearchSpace], CostModel | None] = CostModel,
        compiles_in_turn: bool = False,
        peers: Peers | None = None,
    ):
        """``cost_model`` makes what predicts a configuration's seconds; benchmarks compare dealing
        by cost with dealing blind. ``compiles_in_turn``: no rank has compile workers (batching.py).
        ``peers``: the other device models of the job, which share results (devices/models.py)."""
        self.setup, self.cache, self.clock = setup, cache, clock
        self.space, self.strategy, self.settings = setup.space, setup.strategy, setup.settings
        self.hosts, self.devices = hosts, devices
        self.objective = cache.objective
        self.ranks = len(hosts)
        refilled = self.settings.schedule.resolved(self.ranks) is Schedule.REFILL
        self.compiles_in_turn = compiles_in_turn
        self.batching = Batching.of(
            self.ranks, self.strategy, setup.settings.batch_size, refilled_in_turn=refilled and compiles_in_turn
        )
        extras = setup.problem.kernel.extras
        self._derive = extras.derive if extras is not None and extras.varies else None
        self.handed_out = 0
        self.measured = 0
        self.batch = -1  # the last hand-out made
        self.completed = 0  # hand-outs whose every rank has reported
        self.stop_reason: StopReason | None = None
        self.error = ""  # why a spec's callable stopped the run
        self.in_flight: dict[int, Flight] = {}  # by hand-out: handed out, not yet complete
        self.unmeasured: set[int] = set()  # handed out, never measured (see save_strategy)
        self.stop_requested: StopReason | None = None  # from outside the search: a signal, a lost device
        self.stop_sent = False  # the order to stop went out: nothing more is handed out
        known = [self.objective.evaluate(r, self.space.config(r.config_id)) for r in cache.recorded()]
        cache.rewrite_metrics(known)  # metrics are derived: this run's definitions hold for every row
        self.known = len(known)
        self.best: Scored | None = None
        self.update_best(known)
        # Dealing by cost evens out chunks and gives the costliest to the ranks free first
        # (handouts.py); one configuration a hand-out has nothing to deal.
        self.costs = cost_model(self.space) if self.batching.size > 1 else None
        if self.costs is not None:
            self.costs.learn(known)
        self.race = self._start_race(known)
        replay = setup.problem.kernel.replay
        confirmed = replay.run.confirmed if replay else frozenset()  # as replayed
        self.confirming = Confirming(self.settings.confirm, self.ranks, self.objective.is_kernel_time, cache, confirmed)
        self.leaders = Leaders()  # as measured; calibration may reorder them, confirmation picks from them
        self.leaders.add(known)
        self.calibrating = Calibrating(
            self.ranks,
            self.settings.calibrate and self.objective.is_kernel_time,
            self.settings.device_margin,
            self.settings.seed,
        )
        self.confirmed_last = False  # the last hand-out recorded was the confirmation
        self.peers = peers
        self.portable: list[int] | None = None  # ``--portable``'s candidates, once every model's search ended
        if peers is not None:
            peers.share(known)  # what a resumed file holds is news to the other models too
        self._held: deque[list[list[Scored]]] = deque()  # recorded, told as hand-outs go out (resume.rebuild)
        self._resume_strategy(known)

    @property
    def batch_size(self) -> int:
        return self.batching.size

    def _strategy_key(self) -> str:
        return strategy_key(self.settings, self.objective.key(), self.setup.prior)

    def _resume_strategy(self, known: list[Scored]) -> None:
        """Continue the search of the runs before, if they ran the same strategy with the same seed,
        options and priors. Their recorded asks and tells are replayed into a fresh strategy
        (resume.py); else it starts afresh, knowing the cache."""
        settings, prior, history = self.settings, self.setup.prior, self.cache.history()

        def fresh() -> Strategy:
            return strategies.create(settings.strategy, self.space, settings.seed, settings.strategy_options, prior)

        self.strategy, held = rebuild(fresh, history, known, self._strategy_key(), settings.strategy)
        self._held.extend(held)
        changed = priors_changed(history, prior) if known else None
        if changed:
            log.warning("%s", changed)

    def save_strategy(self) -> None:
        """Record that this run's search ended cleanly, for a resumed run to continue it. Not where
        handed-out configurations came back unmeasured (a lost device, a silent rank): the strategy
        counts them as seen and would never propose them again. A resumed run then starts it afresh
        from the cache. Main thread."""
        # A search that learned other models' results as it ran does not replay from this file alone.
        alone = self.peers is None
        self.cache.end_search(self._strategy_key(), continuable=alone and not self.unmeasured and not self.in_flight)

    def tell_held(self, depth: int | None) -> None:
        """Tell the strategy what the last run told after its last ask, as an uninterrupted run
        would have by now. With ``depth`` hand-outs in flight (batches), one held hand-out as each
        goes out, until fewer than ``depth`` are in flight or held. All at once where ``depth`` is
        None (refill). Main thread."""
        while self._held and (depth is None or len(self.in_flight) + len(self._held) >= depth):
            for report in self._held.popleft():
                self.strategy.tell(report)

    def request_stop(self, reason: StopReason) -> None:
        """Ask the run to stop handing out work for ``reason``; the first request stands. Any
        thread: a signal handler calls it."""
        if self.stop_requested is None:
            self.stop_requested = reason

    def stop_for_silence(self) -> None:
        """Ranks fell silent: the run ends as ``silent_rank``, whatever was asked before. Rank 0's
        main thread, or its heartbeat thread once the main thread cannot end the run."""
        self.stop_reason = self.stop_requested = StopReason.SILENT_RANK

    def poll_stop(self) -> StopReason | None:
        """Why the search has stopped, if it has. A stop asked for from outside (a signal, the stop
        file, a lost device or file) becomes the reason, else the search's own. Main thread."""
        if self.stop_requested is None and self.settings.stop_file and os.path.exists(self.settings.stop_file):
            self.request_stop(StopReason.SIGNAL)
            log.warning("found %s: finishing, then stopping", self.settings.stop_file)
        self.notice_loss()
        if self.stop_requested is not None:
            self.stop_reason = self.stop_requested
        return self.stop_reason

    def stop_unsent(self) -> bool:
        """Whether a stop was asked for and its orders have not gone out. Rank 0 then stops waiting
        for reports and sends them, so that every rank hears it while it measures. Main thread."""
        return not self.stop_sent and self.poll_stop() is not None and self.stop_requested is not None

    def end_search(self, reason: StopReason) -> None:
        """The search ended on its own (the budget, the time limit, the strategy). Main thread."""
        self.stop_reason = reason

    def ask(self, n: int) -> list[int]:
        """The strategy's next ``n`` ids at most; none once it is done (``finished``). It first
        learns what the job's other device models measured since the last ask. Main thread."""
        learned = self.peers.trade() if self.peers is not None else None
        if learned is not None:
            told = ", ".join(f"{s.device_name}: {s.matched}" for s in learned.sources)
            log.info("learned the other device models' results (configurations with a time: %s)", told)
            self.strategy.learn_prior(learned)
        ids = self.strategy.ask(n) if n > 0 else []
        if not ids:
            self.end_search(StopReason.FINISHED)
        return ids

    def portable_lacking(self) -> list[int] | None:
        """In a job of several device models with ``--portable N``, once this model's search ended by
        itself and its hand-outs are recorded: the portable candidates it has not measured, once
        (devices/models.py, ``Peers.portable``). None while another model still searches: the
        ranks then hold. Else, and after, none. Main thread."""
        peers, n = self.peers, self.settings.portable
        if peers is None or not n or self.portable is not None or self.in_flight or self.stop_requested is not None:
            return []
        if self.stop_reason not in CONFIRMABLE:
            return []
        if not peers.ended:
            peers.searched()
        ranked = peers.portable(n)
        if ranked is None:
            log.info("the search has ended; the ranks hold until every other device model's has")
            return None
        self.portable = ranked
        lacking = [i for i in ranked if not peers.own_seen[i]]
        log.info("%d portable candidates, %d not measured on this model yet", len(ranked), len(lacking))
        return lacking

    def others_searching(self) -> bool:
        """Whether this model holds for another model's search (``portable_lacking``) and no stop
        was asked for. Main thread."""
        assert self.peers is not None, "only a job of several device models holds"
        return self.peers.portable(self.settings.portable) is None and not self.stop_unsent()

    def hand_out(
        self, ids: list[int], requested: int, chunks: list[list[int]], told: int, untold: bool = False
    ) -> dict[int, Work] | None:
        """Record hand-out ``batch + 1`` in the file: ``ids`` (the answer to an ask for
        ``requested``) dealt in ``chunks``, ``told`` rows told before the ask. Returns its
        configurations by id. None, with a ``spec_error`` stop, if a spec's callable fails on one of
        them. ``untold``: the portable candidates (``portable_lacking``), whose results are kept but not
        told to the search. Main thread."""
        self.handed_out += len(ids)
        self.batch += 1
        self.cache.hand_out(self.batch, chunks, requested, ids, told=told)
        self.notice_loss()
        try:
            work = self.work(ids, {})
        except ValueError as exc:
            self.stop_reason, self.error = StopReason.SPEC_ERROR, f"{self.setup.problem.kernel.spec_path}: {exc}"
            self.unmeasured |= set(ids)  # never sent
            return None
        self.in_flight[self.batch] = Flight(work, chunks, untold=untold)
        return work

    def work(self, ids: list[int], made: dict[int, Work]) -> dict[int, Work]:
        """Each id as a configuration, with what the spec's per-configuration callables give for it
        (ValueError if one fails). One already ``made`` by a hand-out is reused."""
        work = {}
        for i in ids:
            if i in made:
                work[i] = made[i]
            else:
                config = self.space.config(i)
                work[i] = Work(i, config, self._derive(config) if self._derive is not None else None)
        return work

    def end_orders(self, now_s: float) -> list[Order] | None:
        """The orders once the search has stopped: the confirmation for every rank once the search's
        hand-outs are recorded (None until then), or stop, which goes out once. Main thread."""
        assert self.stop_reason is not None
        if self.stop_requested is None and self.confirming.wanted:
            if self.in_flight:
                return None
            self.write_pending(now=True)  # the search's rows are on disk while its candidates are worked out
            leaders = [self.calibrating.raced(r) for r in self.leaders.results]
            work, sds = (lambda i: self.work(i, {})), self.calibrating.factor_sd()
            extra = self.peers.passed(self.portable) if self.peers is not None and self.portable else None
            orders = self.confirming.orders(self.stop_reason, now_s, self.batch + 1, leaders, work, sds, extra)
            if orders is not None:
                self.batch += 1
                self.in_flight[self.batch] = Flight({}, retime=self.confirming.retime)
                return orders
        self.stop_sent = True
        return [Order(now_s, stop=self.stop_reason)] * self.ranks

    def write(self, batch: int, rank: int, report: Report) -> list[Scored]:
        """``rank``'s report of hand-out ``batch`` into the file. Returns its results in calibrated
        time, for ``tell``; none for the portable candidates, which the search never asked for. Main
        thread."""
        flight = self.in_flight[batch]
        scored = [self.objective.evaluate(r, flight.work[r.config_id].config) for r in report.results]
        self.cache.append(scored, [(rank, p) for p in report.phases], done_batch=batch, done_rank=rank)
        counted = self._count(scored, set(flight.chunks[rank]))
        if not flight.untold:
            return counted
        assert self.peers is not None, "only a job of several device models has portable candidates"
        for r in counted:
            self.peers.keep(r)
        self.leaders.add(counted)
        self.update_best(counted)
        return []

    def complete(self, batch: int) -> None:
        """Every rank has reported hand-out ``batch``. Main thread."""
        del self.in_flight[batch]
        self.completed += 1

    def record_confirmation(self, batch: int, reports: Sequence[Report]) -> None:
        """The confirmation's reports (one per rank, in rank order) into the file, with its verdict.
        Main thread."""
        self.complete(batch)
        trusted = len(reports) == self.ranks and not self.lost_devices(enumerate(reports))
        self.confirming.record(reports, self.clock.now(), trusted, self.settings.seed, self.settings.device_margin)
        self.confirmed_last = True
        self.cache.append_phases([(rank, p) for rank, report in enumerate(reports) for p in report.phases])

    def record_calibration(self, batch: int, reports: Sequence[Report]) -> None:
        """Learn from, and record, the reference's launches in ``reports`` (one per rank)."""
        calibration = [(rank, x) for rank, report in enumerate(reports) for x in report.calibration]
        estimate = self.calibrating.record(reports)
        self.cache.append_calibration(batch, calibration, estimate)
        if estimate:  # the factors changed: the best so far is judged again by them
            self.best = None
            self.update_best([self.calibrating.scored(r) for r in self.leaders.fastest.values()])

    def lost_devices(self, reports: Iterable[tuple[int, Report]]) -> bool:
        """Whether a rank reported its device lost. The run then stops after what is in flight
        (``device_error``), also where the order to stop went out for another reason."""
        lost = [(rank, report.fatal_error) for rank, report in reports if report.fatal_error]
        if lost:
            rank, fatal = lost[0]
            log.error("rank %d (%s): %s", rank, self.hosts[rank], fatal)
            self.stop_requested = StopReason.DEVICE_ERROR  # over any other request: the run is not continuable
            if self.stop_reason is not None:
                self.stop_reason = StopReason.DEVICE_ERROR
        return bool(lost)

    def _count(self, scored: list[Scored], handed: set[int]) -> list[Scored]:
        """Count ``scored``, just written, as measured; the ``handed`` ids missing from it as
        unmeasured. Returns it in calibrated time, for ``tell``."""
        self.notice_loss()
        self.measured += len(scored)
        self.unmeasured |= handed - {r.config_id for r in scored}
        return [self.calibrating.scored(s) for s in scored]

    def write_pending(self, now: bool = False) -> None:
        """Write out what the file was given and has not written (store/cache.py): now, else once it
        is due. At once whenever a stop was asked for: a second Ctrl-C ends the job at once, and
        every row recorded before it is then on disk. Main thread, ``watch.writing`` held."""
        self.cache.write_pending(now or self.stop_requested is not None)
        self.notice_loss()

    def notice_loss(self) -> None:
        """The last write found the file lost to other hands (store/custody.py). The run goes on
        beside the path and stops as for a signal, finishing what the ranks hold."""
        if self.cache.lost is not None:
            self.request_stop(StopReason.FILE_LOST)

    def tell(self, results: list[Scored]) -> None:
        """``results`` as ``record`` gave them: scored in calibrated time (devices/calibrating.py)."""
        self.leaders.add(results)
        self.calibrating.observe(results)
        self.strategy.tell(results)
        if self.peers is not None:
            self.peers.share(results)
        if self.costs is not None:
            self.costs.learn(results)
        self.update_best(results)
        if self.race is not None:
            self.race = self.race.after([self.calibrating.raced(r) for r in results])

    def _start_race(self, known: list[Scored]) -> Race | None:
        """What the ranks race against, from what the file already holds; None when racing is off.
        Only the kernel time can be raced. A metric is the spec's function, evaluated on rank 0
        alone and not necessarily monotonic in time. An observed value (energy) is not what the
        launches time."""
        if not self.settings.racing:
            return None
        if not self.objective.is_kernel_time:
            log.info("racing is off: the objective is %s, not the kernel time", ", ".join(self.objective.names))
            return None
        return Race(rule=self.settings.race_rule).after(known)

    def update_best(self, results: list[Scored]) -> None:
        for r in results:
            if math.isfinite(r.score) and (self.best is None or r.score < self.best.score):
                self.best = r
