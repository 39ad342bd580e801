"""What every rank does with its chunk of a batch. No MPI here: the loop moves the messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mpitune.backends.base import Backend
from mpitune.model.kernel_extras import Derived
from mpitune.model.racing import Race
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Timeline
from mpitune.process.compile_ahead import CompileAhead
from mpitune.scheduling.messages import Order, Report


def serve(
    order: Order,
    backend: Backend,
    space: SearchSpace,
    rank: int,
    timeline: Timeline,
    ahead: CompileAhead | None = None,
    stopping: Callable[[], bool] | None = None,
) -> Report:
    """Carry out one order (not a stop): measure the chunk, and report it with the phases
    recorded since the last report and this rank's clock. ``stopping`` says whether the run
    is ending (the order to stop is waiting, or a signal reached rank 0): then the chunk ends
    before its next configuration (it measures one at least), and the rest comes back
    unmeasured."""
    results = run_chunk(
        backend,
        space,
        order.ids,
        rank,
        order.batch,
        timeline,
        order.derived,
        ahead,
        order.upcoming,
        order.upcoming_derived,
        order.race,
        stopping,
    )
    return Report(results, timeline.take(), timeline.clock.now(), backend.fatal_error)


def run_chunk(
    backend: Backend,
    space: SearchSpace,
    config_ids: Sequence[int],
    rank: int,
    batch: int,
    timeline: Timeline,
    derived: Sequence[Derived] | None = None,
    ahead: CompileAhead | None = None,
    upcoming: Sequence[int] = (),
    upcoming_derived: Sequence[Derived] | None = None,
    race: Race | None = None,
    stopping: Callable[[], bool] | None = None,
) -> list[Result]:
    """Measure each configuration in turn; failures are statuses, never exceptions.

    With compile workers (``ahead``), the whole chunk, then the ``upcoming`` chunk this rank
    will likely get next, is queued for compiling first, so that the device measures one
    configuration while the next ones compile. ``derived`` holds what rank 0 resolved for
    each configuration (kernel_extras.py), aligned with ``config_ids``; None if nothing.

    Stops early when the backend reports its device lost (``backend.fatal_error``): what
    it measured so far is returned, and nothing after it is trusted, nor anything of a chunk
    that was already on its way (two batches are in flight); and, after at least one
    configuration, once ``stopping()`` says the run is ending. That one keeps a chunk of a
    single configuration (a searching strategy's) whole, so that its search stays continuable.

    With a ``race`` (None: racing is off), each configuration races against the best known at
    rank 0 when the batch was dealt and the ones this rank has measured since.
    """
    timeline.batch = batch
    if backend.fatal_error:  # lost with the chunk before: nothing measured here could be trusted
        return []
    items = _items(space, config_ids, derived)
    if ahead is not None:
        ahead.keep_only(list(config_ids) + list(upcoming))
        ahead.submit(items + _items(space, upcoming, upcoming_derived))
    results: list[Result] = []
    for config_id, config, extra in items:
        if results and stopping is not None and stopping():
            break
        started_s = timeline.clock.now()
        compiled = None
        if ahead is not None:
            with timeline.phase("compile", config_id):  # the device waits for the compiler
                compiled = ahead.take(config_id, config, extra, backend.deadline_s())
            row = ahead.row(compiled, batch)
            if row is not None:
                timeline.extend([row])
        result = backend.run(config_id, config, timeline, extra, compiled, race)
        if race is not None:
            race = race.seen([result])
        result.rank, result.batch = rank, batch
        result.started_s, result.finished_s = started_s, timeline.clock.now()
        results.append(result)
        if backend.fatal_error:
            break
    return results


def _items(
    space: SearchSpace, config_ids: Sequence[int], derived: Sequence[Derived] | None
) -> list[tuple[int, dict, Derived | None]]:
    return [(int(c), space.config(int(c)), derived[i] if derived else None) for i, c in enumerate(config_ids)]
