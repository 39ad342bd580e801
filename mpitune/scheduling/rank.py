"""What every rank does with an order: its chunk measured (``carry_out``, ``Chunk``), or the
candidates timed again, into a report. No MPI here: the loop moves the messages; rank 0 serves
its own orders in its lane (lane.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mpitune.backends.base import Backend, Compiled
from mpitune.model.judging.racing import Race
from mpitune.model.result import Result, remade
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work
from mpitune.process.compile_ahead import CompilePool
from mpitune.scheduling.messages import Order, Report


def carry_out(
    order: Order,
    backend: Backend,
    rank: int,
    timeline: Timeline,
    ahead: CompilePool | None = None,
    stopping: Callable[[], bool] | None = None,
    held: Callable[[], Sequence[Order]] | None = None,
) -> Report:
    """Carry out one order (not a stop): measure each configuration of its chunk in turn, and
    report them with the phases recorded since the last report and this rank's clock. Failures
    are statuses, never exceptions.

    With compile workers (``ahead``), the whole chunk, then what the orders this rank already
    ``held`` beyond this one hold (its next order, which comes while it measures), is queued
    for compiling first, so that the device measures one configuration while the next ones
    compile; each with when rank 0 dealt it (what a replay's simulated workers need: there an
    order is seen when its rank replays to it, not when it came).

    Stops early when the backend reports its device lost (``backend.fatal_error``): what it
    measured so far is reported, and nothing after it is trusted, nor anything of a chunk that
    was already on its way; and, after at least one configuration, once ``stopping()`` says the
    run is ending: the rest comes back unmeasured. That keeps a chunk of a single configuration
    (a searching strategy's) whole, so that its search stays continuable.

    With a ``race`` in the order (None: racing is off), each configuration races against the
    best known at rank 0 when the batch was dealt and the ones this rank has measured since;
    under the first-launch rule, with compile workers, in two passes (``Chunk.two_passes``).
    """
    timeline.batch = order.batch
    if backend.fatal_error:  # lost with the chunk before: nothing measured here could be trusted
        return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error)
    if order.retime is not None:  # confirmation: all compiled before the first launch, so that compiling
        # does not load the device's host between the interleaved launches; what the workers still
        # had queued of the search is dropped; a stop ends it between two compiles or two launches
        if ahead is not None:
            ahead.keep_only(order.retime.ids)
        compiled = _compiled_ahead(order.retime, backend, timeline, ahead, stopping)
        stopped = stopping is not None and stopping()
        launches = [] if stopped else backend.retime(order.retime, timeline, compiled, stopping)
        return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, tuple(launches))
    calibration: tuple[Launch, ...] = ()
    if order.calibrate is not None:  # before the chunk: what the workers queue of it waits behind
        compiled = _compiled_ahead(order.calibrate, backend, timeline, ahead)
        calibration = tuple(backend.retime(order.calibrate, timeline, compiled))
    if ahead is not None:
        later = tuple(held()) if held is not None else ()
        ahead.keep_only(order.ids + tuple(i for o in later for i in o.ids))
        _queue(ahead, (order, *later))
    chunk = Chunk(order, backend, rank, timeline, ahead, stopping, held)
    if order.race is not None and order.race.looks_ahead and ahead is not None and len(order.work) > 1:
        results = chunk.two_passes(order.race)
    else:
        results = chunk.in_order(order.work, order.race)
    return Report(tuple(results), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, (), calibration)


def _compiled_ahead(
    retime: Retime,
    backend: Backend,
    timeline: Timeline,
    ahead: CompilePool | None,
    stopping: Callable[[], bool] | None = None,
) -> dict[int, Compiled]:
    """The order's configurations compiled by the compile workers (none without them), with
    their background compiles on the timeline; fewer once ``stopping()`` says so."""
    compiled: dict[int, Compiled] = {}
    if ahead is not None:
        ahead.submit(retime.work)
        for work in retime.work:
            if stopping is not None and stopping():
                break
            compiled[work.config_id] = _take(ahead, work, backend, timeline)
    return compiled


def _queue(ahead: CompilePool, orders: Sequence[Order]) -> None:
    """Each order's configurations to the compile workers, with when rank 0 dealt it."""
    for order in orders:
        ahead.submit(order.work, since_s=order.now_s)


def _take(ahead: CompilePool, work: Work, backend: Backend, timeline: Timeline) -> Compiled:
    """``work`` from the compile workers, the device waiting for it, with their background
    compile on the timeline."""
    with timeline.phase("compile", work.config_id):
        compiled = ahead.take(work, backend.deadline_s())
    row = ahead.row(compiled, timeline.batch)
    if row is not None:
        timeline.extend([row])
    return compiled


class Chunk:
    """One order's configurations measured on this rank: the steps ``carry_out`` composes."""

    def __init__(
        self,
        order: Order,
        backend: Backend,
        rank: int,
        timeline: Timeline,
        ahead: CompilePool | None,
        stopping: Callable[[], bool] | None,
        held: Callable[[], Sequence[Order]] | None = None,
    ):
        self.order, self.backend, self.rank, self.timeline = order, backend, rank, timeline
        self.ahead, self.stopping, self.held = ahead, stopping, held

    def in_order(self, work: Sequence[Work], race: Race | None) -> list[Result]:
        """Each configuration in turn, racing against the best known and the ones measured since;
        stops early as ``carry_out`` says."""
        results: list[Result] = []
        for item in work:
            if results and self.stopping is not None and self.stopping():
                break
            results.append(self.measure(item, race))
            if race is not None:
                race = race.seen(results[-1:])
            if self.backend.fatal_error:
                break
        return results

    def two_passes(self, race: Race) -> list[Result]:
        """First every configuration's verified first launch, then timed launches for those whose
        first launch, fastest first, is within the bound of the best known by then.

        Why: in the order the chunk came in, each configuration faster than the best so far
        lowers the bound only a little, and all of them get every launch. Taken fastest first,
        the first one timed is about the chunk's best, and the rest mostly lose on the first
        launch they already made. A survivor is compiled again by the workers (a library file
        is gone once loaded; one that then loses to a best found in this pass was compiled for
        nothing, which costs a worker, not the device) and measured whole, its verification
        included, so that its result is exactly what one pass would have made of it; one that
        loses keeps its first pass's result, the one-launch result the first-launch rule gives.
        A chunk that must end early (the run is ending, the device is lost) drops the
        configurations still deferred: they come back unmeasured rather than stopped by a bound
        that was no one's best."""
        first = self.in_order(self.order.work, race.first_pass())
        deferred = sorted(
            (r for r in first if r.ok and r.raced and math.isfinite(r.first_ms)), key=lambda r: r.first_ms
        )
        deferred_ids = {r.config_id for r in deferred}
        final = {r.config_id: r for r in first if r.config_id not in deferred_ids}
        race = race.seen(final.values())
        work = {w.config_id: w for w in self.order.work}
        survivors = [work[r.config_id] for r in deferred if not race.lost_first(r.first_ms)]
        assert self.ahead is not None, "two passes need compile workers"
        self.ahead.submit(survivors)
        for r in deferred:
            if self.backend.fatal_error or (final and self.stopping is not None and self.stopping()):
                break
            if race.lost_first(r.first_ms):
                final[r.config_id] = r
                continue
            final[r.config_id] = self.measure(work[r.config_id], race)
            race = race.seen([final[r.config_id]])
        return [final[w.config_id] for w in self.order.work if w.config_id in final]

    def measure(self, work: Work, race: Race | None) -> Result:
        """One configuration, compiled ahead where there are compile workers, as a result of this
        rank and batch with its place on the rank's clock."""
        timeline = self.timeline
        started_s = timeline.clock.now()
        compiled = None
        if self.ahead is not None:
            compiled = _take(self.ahead, work, self.backend, timeline)
            if self.held is not None:  # an order that came while this compiled: it compiles while this runs
                _queue(self.ahead, self.held())
        result = self.backend.run(work, timeline, compiled, race)
        return remade(
            result, rank=self.rank, batch=self.order.batch, started_s=started_s, finished_s=timeline.clock.now()
        )
