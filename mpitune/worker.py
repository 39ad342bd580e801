"""What every rank does with its chunk of a batch. No MPI here: the scheduler moves data."""

from __future__ import annotations

from collections.abc import Sequence

from .backends.base import Backend
from .result import Result
from .searchspace import SearchSpace
from .timeline import Timeline


def run_chunk(backend: Backend, space: SearchSpace, config_ids: Sequence[int], rank: int,
              batch: int, timeline: Timeline) -> list[Result]:
    """Measure each configuration in turn; failures are statuses, never exceptions.

    Stops early when the backend reports its device lost (``backend.fatal_error``): what
    it measured so far is returned, and nothing after it is trusted.
    """
    timeline.batch = batch
    results = []
    for config_id in config_ids:
        started_s = timeline.clock.now()
        result = backend.run(int(config_id), space.config(int(config_id)), timeline)
        result.rank, result.batch = rank, batch
        result.started_s, result.finished_s = started_s, timeline.clock.now()
        results.append(result)
        if backend.fatal_error:
            break
    return results
