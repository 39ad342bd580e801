"""What every rank does with its chunk of a batch. No MPI here: the loop moves the messages."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mpitune.backends.base import Backend, Compiled
from mpitune.model.launches import Launch, Retime
from mpitune.model.result import Result
from mpitune.model.timeline import Timeline
from mpitune.process.compile_ahead import CompileAhead
from mpitune.scheduling.messages import Order, Report


def serve(
    order: Order,
    backend: Backend,
    rank: int,
    timeline: Timeline,
    ahead: CompileAhead | None = None,
    stopping: Callable[[], bool] | None = None,
) -> Report:
    """Carry out one order (not a stop): measure each configuration of its chunk in turn, and
    report them with the phases recorded since the last report and this rank's clock. Failures
    are statuses, never exceptions.

    With compile workers (``ahead``), the whole chunk, then the ``upcoming`` chunk this rank
    will likely get next, is queued for compiling first, so that the device measures one
    configuration while the next ones compile.

    Stops early when the backend reports its device lost (``backend.fatal_error``): what
    it measured so far is reported, and nothing after it is trusted, nor anything of a chunk
    that was already on its way (two batches are in flight); and, after at least one
    configuration, once ``stopping()`` says the run is ending (the order to stop is waiting, or
    a signal reached rank 0): the rest comes back unmeasured. That keeps a chunk of a single
    configuration (a searching strategy's) whole, so that its search stays continuable.

    With a ``race`` in the order (None: racing is off), each configuration races against the
    best known at rank 0 when the batch was dealt and the ones this rank has measured since.
    """
    timeline.batch = order.batch
    results: list[Result] = []
    if backend.fatal_error:  # lost with the chunk before: nothing measured here could be trusted
        return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error)
    if order.retime is not None:
        return _retime(order.retime, backend, timeline, ahead)
    calibration: tuple[Launch, ...] = ()
    if order.calibrate is not None:
        calibration = tuple(_reference(order.calibrate, backend, timeline, ahead))
    if ahead is not None:
        ahead.keep_only(order.ids + order.upcoming_ids)
        ahead.submit(order.work + order.upcoming)
    race = order.race
    for work in order.work:
        if results and stopping is not None and stopping():
            break
        started_s = timeline.clock.now()
        compiled = None
        if ahead is not None:
            with timeline.phase("compile", work.config_id):  # the device waits for the compiler
                compiled = ahead.take(work, backend.deadline_s())
            row = ahead.row(compiled, order.batch)
            if row is not None:
                timeline.extend([row])
        result = backend.run(work, timeline, compiled, race)
        if race is not None:
            race = race.seen([result])
        results.append(
            dataclasses.replace(
                result, rank=rank, batch=order.batch, started_s=started_s, finished_s=timeline.clock.now()
            )
        )
        if backend.fatal_error:
            break
    return Report(tuple(results), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, (), calibration)


def _reference(calibrate: Retime, backend: Backend, timeline: Timeline, ahead: CompileAhead | None) -> list[Launch]:
    """The reference's launches (calibration), before the chunk: the compile workers compile it
    first, and what they queue of the chunk waits behind it."""
    return backend.retime(calibrate, timeline, _compiled_ahead(calibrate, backend, timeline, ahead))


def _retime(retime: Retime, backend: Backend, timeline: Timeline, ahead: CompileAhead | None) -> Report:
    """Time the candidates again (confirmation), all compiled before the first launch, so that
    compiling does not load the device's host between the interleaved launches; what the
    workers still had queued of the search is dropped."""
    if ahead is not None:
        ahead.keep_only(retime.ids)
    launches = backend.retime(retime, timeline, _compiled_ahead(retime, backend, timeline, ahead))
    return Report((), tuple(timeline.take()), timeline.clock.now(), backend.fatal_error, tuple(launches))


def _compiled_ahead(
    retime: Retime, backend: Backend, timeline: Timeline, ahead: CompileAhead | None
) -> dict[int, Compiled]:
    """The order's configurations compiled by the compile workers (none without them), with
    their background compiles on the timeline."""
    compiled: dict[int, Compiled] = {}
    if ahead is not None:
        ahead.submit(retime.work)
        for work in retime.work:
            with timeline.phase("compile", work.config_id):
                compiled[work.config_id] = ahead.take(work, backend.deadline_s())
            row = ahead.row(compiled[work.config_id], timeline.batch)
            if row is not None:
                timeline.extend([row])
    return compiled
