"""Confirmation on a GPU: the best candidates loaded at once and timed again in turn, round after
round, each launch between its own pair of events on the backend's stream (``Backend.retime``).

Kept beside the backend, which it drives through the same steps ``run`` takes (loading, the
launch geometry, the launch itself, the classification of failures), so that a candidate is
launched here exactly as it was measured during the search.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpitune.backends.base import Compiled, interleaved, unlaunched
from mpitune.backends.cupy.geometry import Dims, block_dims, grid_dims
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

if TYPE_CHECKING:
    from mpitune.backends.cupy.backend import CupyBackend

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """One candidate ready to launch: its kernel (which holds its module loaded) and geometry."""

    work: Work
    kernel: Any
    grid: Dims
    block: Dims
    smem_bytes: int


def retime(
    backend: CupyBackend,
    retime: Retime,
    timeline: Timeline,
    compiled: Mapping[int, Compiled] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> list[Launch]:
    """Compile what was not compiled ahead, load every candidate, warm each up once on freshly
    reset arguments, then time them interleaved. A lost context ends it: NaN for the rest."""
    if backend.fatal_error:
        return unlaunched(retime)
    ready = dict(compiled or {})
    for work in retime.work:
        if work.config_id not in ready:
            with timeline.phase("compile", work.config_id):
                ready[work.config_id] = backend.compiler()(work)
    with timeline.phase(retime.phase):
        start, end = backend.cp.cuda.Event(), backend.cp.cuda.Event()  # while the context is known good
        loaded = [_load(backend, work, ready[work.config_id]) for work in retime.work]
        for i, candidate in enumerate(loaded):
            if candidate is not None and not _warm_up(backend, candidate):
                loaded[i] = None

        def launch_ms(i: int) -> float:
            candidate = loaded[i]
            if candidate is None or backend.fatal_error:
                return math.nan
            try:
                _apply(backend, candidate)
                start.record(backend.stream)
                backend._launch(candidate.kernel, candidate.grid, candidate.block)
                end.record(backend.stream)
                end.synchronize()
                return float(backend.cp.cuda.get_elapsed_time(start, end))
            except Exception as exc:
                _fail(backend, candidate, exc)
                loaded[i] = None
                return math.nan

        try:
            return interleaved(retime.ids, retime.rounds, launch_ms, stopping)
        finally:
            loaded.clear()  # the last references to the modules, which unloads them


def _load(backend: CupyBackend, work: Work, compiled: Compiled) -> Loaded | None:
    """The candidate's kernel and geometry, as ``run`` computes them; None when it cannot be
    loaded (or the context is gone)."""
    if compiled.status or backend.fatal_error:
        log.warning("configuration %d cannot be re-timed: %s", work.config_id, compiled.error or backend.fatal_error)
        return None
    kernel, error = backend._load(compiled)
    if kernel is None:
        log.warning("configuration %d cannot be re-timed: %s", work.config_id, error)
        return None
    names = backend.problem.block_size_names
    try:
        block = block_dims(work.config, names)
        grid = grid_dims(backend.problem.problem_size, work.config, backend.problem.grid_div, names)
    except Exception as exc:  # computable for any configuration the search measured
        log.warning("configuration %d cannot be re-timed: %s", work.config_id, exc)
        return None
    return Loaded(work, kernel, grid, block, work.derived.smem_bytes if work.derived else 0)


def _apply(backend: CupyBackend, candidate: Loaded) -> None:
    """What the launch of this candidate needs set: its dynamic shared memory and, when clocks
    or power limits are tuned, its NVML settings (a no-op where they are in force already)."""
    backend._smem_bytes = candidate.smem_bytes
    if backend._clocks is not None:
        backend._clocks.apply(candidate.work.config)


def _warm_up(backend: CupyBackend, candidate: Loaded) -> bool:
    """One untimed launch on freshly reset arguments, as ``run``'s verification launch is (but
    nothing is compared: the search verified it). False when it failed, or the context is gone."""
    if backend.fatal_error:
        return False
    try:
        _apply(backend, candidate)
        backend._fresh_launch(candidate.kernel, candidate.grid, candidate.block)
        return True
    except Exception as exc:
        _fail(backend, candidate, exc)
        return False


def _fail(backend: CupyBackend, candidate: Loaded, exc: Exception) -> None:
    """Classify the failure as ``run`` does; a lost context sets the backend's fatal error."""
    status, error = backend._failure(exc, candidate.kernel, candidate.grid, candidate.block, "confirmation")
    log.warning("configuration %d failed while re-timed (%s): %s", candidate.work.config_id, status, error)
