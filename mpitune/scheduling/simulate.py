"""A replayed rank's simulated clock and compile workers, and a replay's whole run on several ranks
in this process, for ``python -m mpitune plan`` and the benchmarks: the real rounds over
``InProcessRanks``, each rank on its own simulated clock."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, replace

from mpitune import backends
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.replay_clock import RecordedRun
from mpitune.model.timeline import Clock, Timeline
from mpitune.process.compile_ahead import CompilePool
from mpitune.process.simulated_compile import SimulatedCompileAhead
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.messages import Placement
from mpitune.scheduling.prepare import prepare
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.run_record import finish, open_run
from mpitune.scheduling.transport import InProcessRanks


def replay_timeline(recorded: RecordedRun, rank: int) -> Timeline:
    """A replayed rank's timeline: charged as the recorded run was, from its recorded start-up."""
    timeline = Timeline(Clock(simulated=True, charges_s=recorded.charges_s))
    recorded.charge_start(timeline, rank)
    return timeline


def simulated_ahead(recorded: RecordedRun, workers: int | None, clock: Clock, rank: int) -> CompilePool | None:
    """A replayed rank's compile workers: numbers on its simulated clock (none for no workers)."""
    if not workers:
        return None
    return SimulatedCompileAhead(
        workers, clock, recompile_s=recorded.recompile_s, ready_s=recorded.rank_compile_ready_s(rank)
    )


@dataclass(frozen=True)
class Simulated:
    """One simulated run: its ranks, simulated wall time and configurations measured."""

    ranks: int
    wall_s: float
    measured: int


def simulate(problem: Problem, settings: RunSettings, ranks: int, workdir: str) -> Simulated:
    """The replay of ``problem`` on ``ranks`` ranks, all in this process, into a file in
    ``workdir``, for ``python -m mpitune plan``. The real rounds run over ``InProcessRanks``. Each
    rank has its own replay backend, clock, recorded start-up and simulated compile workers, as
    under mpiexec. Its progress lines are not printed."""
    recorded = problem.kernel.replay.run if problem.kernel.replay else RecordedRun()
    workers = recorded.compile_workers if settings.compile_workers is None else settings.compile_workers
    settings = replace(settings, cache_path=os.path.join(workdir, f"plan-{ranks}.h5"))
    setup = prepare(problem, settings)
    timelines: list[Timeline] = []
    aheads: list[CompilePool | None] = []
    benches = []
    measuring: Timeline | None = None  # rank 0's own, on several ranks (rank.py)
    for rank in range(ranks):
        timelines.append(replay_timeline(recorded, rank))
        benches.append(backends.create(problem.for_workers(), workdir, 0, rank))
        if rank == 0 and ranks > 1:
            measuring = measuring_timeline(timelines[0])
        clock = measuring.clock if rank == 0 and measuring is not None else timelines[-1].clock
        aheads.append(simulated_ahead(recorded, workers, clock, rank))
        if aheads[-1] is not None:
            aheads[-1].compiler = benches[-1].compiler()
    world = InProcessRanks(benches, timelines, aheads)
    placements = [Placement("simulated", b.device_name, "", 0, workers) for b in benches]
    with contextlib.redirect_stdout(io.StringIO()):  # the progress lines
        manager, error = open_run(setup, placements, timelines[0].clock, 0.0, "plan")
        assert manager is not None, error
        rounds(world, manager, benches[0], timelines[0], aheads[0], Watch(), lambda: None, measuring)
        finish(manager, timelines[0])
    return Simulated(ranks, timelines[0].clock.now(), manager.measured)
