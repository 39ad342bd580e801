"""Rounds of a brute-force replay, for benchmarks/scheduler.py: rank 0's Manager as the loop
opens it, a whole run simulated in one process on the scheduler's one dispatch path
(scheduling/handouts.py, by either policy), and what other ways of sharing out the recorded
durations would reach.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
from collections.abc import Callable, Sequence

import numpy as np

from mpitune import backends
from mpitune.model.problem import Schedule
from mpitune.model.result import Status
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, Timeline
from mpitune.scheduling.costs import CostModel, result_cost_s
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.prepare import prepare
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.transport import InProcessRanks
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured
from mpitune.store.cache import Cache, RunInfo


def replay_manager(
    source: str,
    out: str,
    ranks: int,
    batch_size: int | None,
    strategy: str,
    budget: int | None,
    schedule: Schedule = Schedule.AUTO,
    cost_model: Callable[[SearchSpace], CostModel | None] = CostModel,
) -> tuple[Manager, Cache, SearchSpace]:
    """Rank 0's Manager of a replay of ``source`` on ``ranks`` ranks, as the loop opens it,
    writing into the HDF5 file ``out`` (``batch_size`` None: the default), handing out work by
    ``schedule`` (the settings' ``--schedule``; auto: refill on several ranks) and predicting
    costs with ``cost_model`` (the Manager's keyword: ``Interleaved`` or None to deal blind).
    Without confirmation: these figures are the search's scheduling (benchmarks/confirmation.py
    measures what confirming costs). Its ranks serve their orders in turn, compiling each
    configuration as they come to it: the Manager deals as it does for ranks without compile
    workers (``compiles_in_turn``)."""
    given = Overrides(
        cache_path=out,
        strategy=strategy,
        batch_size=batch_size,
        max_fevals=budget,
        seed=1,
        confirm=0,
        schedule=schedule.value,
    )
    problem, settings = replay_problem(measured.load(source), given)
    setup = prepare(problem, settings)
    cache = Cache(
        settings.cache_path, problem.identity(["replayed"]), problem.kernel.tune_params, problem.kernel.iterations
    )
    hosts, devices = ("host",) * ranks, ("replayed",) * ranks
    manager = Manager(setup, cache, hosts, devices, Clock(simulated=True), cost_model=cost_model, compiles_in_turn=True)
    cache.start_run(
        RunInfo(0.0, ranks, strategy, 1, budget, None, manager.batch_size, len(setup.space), "", ""),
        ("host",) * ranks,
        ("replayed",) * ranks,
        (0,) * ranks,
    )
    return manager, cache, setup.space


class Interleaved(CostModel):
    """A cost model that never predicts, so that the Manager deals interleaved
    (``batching.deal``), as before dealing by cost: the baseline of the simulation (the
    Manager's ``cost_model``; it still learns, so chunks grow as once costs are known)."""

    def predict_s(self, ids: Sequence[int]) -> None:
        return None


def simulated_efficiency(
    source: str, workdir: str, ranks: int, batch_size: int | None, by_cost: bool, schedule: Schedule = Schedule.AUTO
) -> dict:
    """A brute-force replay on ``ranks`` ranks in one process, as the loop runs it: the real
    rounds (scheduling/rounds.py) over ``InProcessRanks``, whose hand-outs (scheduling/
    handouts.py) follow ``schedule`` (auto, the default: refill on several ranks, each rank
    refilled as it runs short and each report told as it comes; batches: two batches in flight,
    each told once all its reports are in) and deal by predicted cost, or interleaved (the
    Manager's ``cost_model`` an ``Interleaved`` that never predicts). Every rank serves its
    orders in turn with the replay backend on its own simulated clock, which catches up with
    rank 0's when the order went out; rank 0 measures its own orders in its lane on a clock of
    its own (``measuring_timeline``), beside its hand-outs, as on several ranks it does by
    either policy. Efficiency: sum of compile + verify + benchmark seconds / (ranks x simulated
    wall); ``batches``: hand-outs made; ``path``: the replay's file."""
    out = os.path.join(workdir, f"sim-{os.path.basename(source)}-{ranks}-{batch_size}-{by_cost}-{schedule.value}.h5")
    cost_model = CostModel if by_cost else Interleaved
    manager, cache, _ = replay_manager(source, out, ranks, batch_size, "brute_force", None, schedule, cost_model)
    backend = backends.create(manager.setup.problem.kernel, workdir, 0)
    own = backends.create(manager.setup.problem.kernel, workdir, 0)  # rank 0's: its lane measures in a thread
    timelines = [Timeline(manager.clock)] + [Timeline(Clock(simulated=True)) for _ in range(ranks - 1)]
    world = InProcessRanks([own] + [backend] * (ranks - 1), timelines)
    measuring = measuring_timeline(timelines[0]) if ranks > 1 else None
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
