"""Rounds of a brute-force replay, for benchmarks/scheduler.py: rank 0's Manager as the loop
opens it, a whole run simulated round by round in one process, and what other ways of
sharing out the recorded durations would reach.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
from collections.abc import Sequence

import numpy as np

from mpitune import backends
from mpitune.model.problem import Schedule
from mpitune.model.result import Status
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, Timeline
from mpitune.scheduling.costs import CostModel, result_cost_s
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.session import prepare
from mpitune.scheduling.transport import InProcessRanks
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured
from mpitune.store.cache import Cache, RunInfo


def replay_manager(
    source: str, out: str, ranks: int, batch_size: int | None, strategy: str, budget: int | None
) -> tuple[Manager, Cache, SearchSpace]:
    """Rank 0's Manager of a replay of ``source`` on ``ranks`` ranks, as the loop opens it,
    writing into the HDF5 file ``out`` (``batch_size`` None: the default, guided batches).
    Without confirmation: these figures are the search's scheduling (benchmarks/confirmation.py
    measures what confirming costs)."""
    problem, settings = replay_problem(
        measured.load(source),
        Overrides(cache_path=out, strategy=strategy, batch_size=batch_size, max_fevals=budget, seed=1, confirm=0),
    )
    setup = prepare(problem, settings)
    cache = Cache(settings.cache_path, problem.identity(["replayed"]), problem.tune_params, problem.iterations)
    manager = Manager(setup, cache, ("host",) * ranks, ("replayed",) * ranks, Clock(simulated=True))
    cache.start_run(
        RunInfo(0.0, ranks, strategy, 1, budget, None, manager.batch_size, len(setup.space), "", ""),
        ("host",) * ranks,
        ("replayed",) * ranks,
        (0,) * ranks,
    )
    return manager, cache, setup.space


class Interleaved(CostModel):
    """A cost model that never predicts, so that the Manager deals interleaved
    (``batching.deal``), as before dealing by cost: the baseline of the simulation."""

    def predict_s(self, ids: Sequence[int]) -> None:
        return None


def simulated_efficiency(
    source: str, workdir: str, ranks: int, batch_size: int | None, by_cost: bool, schedule: Schedule = Schedule.BATCHES
) -> dict:
    """A brute-force replay on ``ranks`` ranks in one process, batch by batch as the loop runs
    it: the real rounds (scheduling/rounds.py) over ``InProcessRanks``, whose Manager deals (by
    cost, or interleaved) and keeps its batches in flight (two on several ranks); every rank
    serves its orders in turn with the replay backend on its own simulated clock, which catches
    up with rank 0's when the order went out, and rank 0's with the slowest rank's when it
    records a batch (rank 0 measures its own chunk of a batch, then waits for the batch); or,
    with ``schedule`` refill, each rank refilled as it runs short (scheduling/refill/), rank 0
    measuring beside on a clock of its own. Efficiency: sum of compile + verify + benchmark
    seconds / (ranks x simulated wall); ``path``: the replay's file."""
    out = os.path.join(workdir, f"sim-{ranks}-{batch_size}-{by_cost}-{schedule.value}.h5")
    manager, cache, space = replay_manager(source, out, ranks, batch_size, "brute_force", None)
    manager.settings.schedule = schedule
    if not by_cost:
        manager.costs = Interleaved(space)
    backend = backends.create(manager.setup.problem, workdir, 0)
    own = backends.create(manager.setup.problem, workdir, 0)  # rank 0's: its lane measures in a thread
    timelines = [Timeline(manager.clock)] + [Timeline(Clock(simulated=True)) for _ in range(ranks - 1)]
    world = InProcessRanks([own] + [backend] * (ranks - 1), timelines)
    measuring = measuring_timeline(timelines[0]) if schedule is Schedule.REFILL else None
    with contextlib.redirect_stdout(io.StringIO()):  # the progress lines
        rounds(world, manager, own, timelines[0], None, Watch(), lambda: None, measuring)
    busy_s = sum(result_cost_s(r) for r in cache.recorded())
    cache.close()
    wall_s = manager.clock.now()
    return {"efficiency": busy_s / (ranks * wall_s), "wall_s": wall_s, "batches": manager.batch + 1, "path": out}


def durations(source: str) -> np.ndarray:
    """Recorded compile + verify + benchmark seconds of every configuration, in id order."""
    data = measured.load(source)
    space = SearchSpace.from_configs(data.tune_params, data.configs)
    lookup = data.lookup()
    names = list(data.tune_params)
    cost = np.empty(len(space))
    for i in range(len(space)):
        config = space.config(i)
        m = lookup[tuple(config[n] for n in names)]
        cost[i] = m.compile_s + (0.0 if m.status == Status.COMPILE_ERROR else m.verify_s + m.benchmark_s)
    return cost


def list_schedule_s(costs: np.ndarray, ranks: int) -> float:
    """Makespan when each rank takes the next configuration as soon as it is free."""
    free_at = [0.0] * ranks
    for c in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + float(c))
    return max(free_at)


def double_buffered_s(loads: list[np.ndarray]) -> float:
    """Makespan of rounds whose next chunk is already on its rank when the rank finishes one
    (rank 0 sends batch k once it has gathered batch k - 2): a rank waits only when it is a
    whole batch ahead of the slowest. ``loads[k][r]``: rank r's seconds in batch k."""
    free_s = np.zeros(len(loads[0])) if loads else np.zeros(0)
    gathered_s = [0.0, 0.0]
    for load in loads:
        free_s = np.maximum(free_s, gathered_s[-2]) + load
        gathered_s.append(float(free_s.max()))
    return gathered_s[-1]
