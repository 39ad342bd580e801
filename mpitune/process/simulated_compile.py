"""A rank's compile workers on a replay's simulated clock.

This does with numbers what compile_ahead.py does with processes. So a replay charges a rank the
compiles it would have waited for, and no others.

``workers`` workers take what the rank queues, in order, each as soon as one is free. Each
compile takes its recorded time; the backend's ``compiler`` says it (backends/replay.py).
Compiling a configuration again takes what the replayed run's repeated compiles did. The rank
waits for a configuration only when its compile ends after the rank wants it. That wait is the
rank's ``compile`` phase. The compile itself is phase ``compile_ahead``, as in a run.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections.abc import Iterable

from mpitune.backends.base import Compiled, Compiler
from mpitune.model.replay_clock import RecordedRun
from mpitune.model.timeline import Clock, PhaseRow
from mpitune.model.work import Work


def replayed(recorded: RecordedRun, workers: int | None, clock: Clock, rank: int) -> SimulatedCompileAhead | None:
    """A replayed rank's compile workers, as the recorded run started them (None for no workers)."""
    if not workers:
        return None
    return SimulatedCompileAhead(
        workers, clock, recompile_s=recorded.recompile_s, ready_s=recorded.rank_compile_ready_s(rank)
    )


class SimulatedCompileAhead:
    """``CompileAhead``'s interface on a simulated clock; nothing runs, nothing is started."""

    def __init__(
        self,
        workers: int,
        clock: Clock,
        compiler: Compiler | None = None,
        recompile_s: float | None = None,
        ready_s: float = 0.0,
    ):
        """``ready_s``: when the workers can first compile.

        That is a cold worker's start, as recorded."""
        self.workers, self.clock, self.compiler = workers, clock, compiler
        self.recompile_s = recompile_s  # a compile repeated on this rank (None: as long as the first)
        self._free_s = [ready_s] * workers  # when each worker is next free, as a heap
        self._looks_s: list[float] = []  # when the rank took a configuration: when it looks for new orders
        self._queued: dict[int, Compiled] = {}  # scheduled and not yet taken, with its start and end
        self._compiled: set[int] = set()  # compiled on this rank before

    def submit(self, items: Iterable[Work], since_s: float | None = None) -> None:
        """Queue configurations in order; each goes to the worker free first.

        It goes from now, or from a later time for an order rank 0 dealt at ``since_s``. That
        time is when this rank first took a configuration after ``since_s``. A real rank queues
        an order once it takes its next configuration, while it measures the one before. But a
        replayed rank sees the order only when it replays to it. That may be later on its clock."""
        from_s = self.clock.now()
        if since_s is not None:
            at = bisect.bisect_left(self._looks_s, since_s)
            from_s = min(from_s, self._looks_s[at]) if at < len(self._looks_s) else from_s
        assert self.compiler is not None, "the compiler is set before anything is submitted"
        for work in items:
            if work.config_id in self._queued:
                continue
            compiled = self.compiler(work)
            took_s = compiled.compile_s
            if work.config_id in self._compiled and self.recompile_s is not None:
                took_s = min(took_s, self.recompile_s)
            self._compiled.add(work.config_id)
            started_s = max(heapq.heappop(self._free_s), from_s)
            finished_s = started_s + took_s
            heapq.heappush(self._free_s, finished_s)
            self._queued[work.config_id] = dataclasses.replace(compiled, started=started_s, finished=finished_s)

    def keep_only(self, config_ids: Iterable[int]) -> None:
        """Forget what will not be measured.

        As with processes, the workers' time on it is spent."""
        keep = set(config_ids)
        for config_id in [c for c in self._queued if c not in keep]:
            del self._queued[config_id]

    def take(self, work: Work, deadline_s: float | None) -> Compiled:
        """The configuration compiled.

        The clock advances to the end of its compile if that is later: the rank waited for it.
        A recorded timeout or failure is its status."""
        self.submit([work])
        compiled = self._queued.pop(work.config_id)
        self.clock.advance(max(compiled.finished - self.clock.now(), 0.0))
        self._looks_s.append(self.clock.now())
        return compiled

    def row(self, compiled: Compiled, batch: int) -> PhaseRow | None:
        """The background compile on the simulated clock; None for one that took no time."""
        if compiled.finished <= compiled.started:
            return None
        return PhaseRow(batch, compiled.config_id, "compile_ahead", compiled.started, compiled.finished)

    def close(self) -> None:
        self._queued.clear()
