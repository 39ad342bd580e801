"""What other rules for handing out work would gain a learning search on several ranks.

    PYTHONPATH=. python benchmarks/pipelining.py CACHE_DIR [CACHE_DIR ...] [--ranks 8] [--seeds 4]
        [--budgets 50 100 200 400]

The default strategy's searches on each measured cache (``*.json``, ``*.json.gz``, ``*.h5``),
replayed without MPI as benchmarks/strategies.py replays them, under four rules; for each, the
mean score at each budget and the simulated wall time on ``--ranks`` ranks over the same
evaluations on one rank, over all caches of a directory and in the worst one:

- ``now``: what the scheduler's batches did when this benchmark was first run (``--schedule
  batches`` before rank 0 measured in a lane). One configuration per rank per batch, two
  batches in flight (batch b goes out once batch b - 2 is recorded), dealt by predicted cost;
  rank 0 records each batch after its own chunk of it, so it waits for the slowest rank every
  batch.
- ``rank 0 beside``: the same, with rank 0 measuring its chunks beside its gathers, as a worker:
  what ``--schedule batches`` does now on several ranks (rank 0 measures in its lane).
- ``two per rank``: what ``--batch-size`` of twice the ranks does with batches: two
  configurations per rank, which even out better, and the strategy learns half as often.
- ``refill``: no batches, the rule that became the scheduler's default on several ranks
  (scheduling/handouts.py). Each rank holds the configuration it measures and at most one more;
  whenever half the ranks hold no next one, rank 0 asks the strategy for one per such rank,
  knowing every result reported so far (told one by one as they come, not batch by batch), and
  deals them by predicted cost, the costliest to the rank predicted to be free first. Rank 0
  measures beside, as a worker.

Then brute force on the largest cache of the first directory at ``--brute-force-ranks``:
the efficiency the scheduler reaches by default (refill; benchmarks/replay_rounds.py's
``simulated_efficiency``, racing on as by default); batches (two of one configuration per rank,
dealt blind, then 32 per rank), two in flight, dealt by the exact costs that run measured (what
perfect predictions would give), with rank 0 recording each batch after its own chunk and
beside it; and ranks pulling the next configuration as soon as they are free, with no batches.

A score at a budget is that of the first ``budget`` configurations handed out. For ``refill`` an
ask that crosses a budget is not repeated smaller as benchmarks/strategies.py does, so its score
there is of a slightly different search than a run of that budget would make.
"""

from __future__ import annotations

import argparse
import heapq
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import pairwise

import numpy as np
from replay_rounds import list_schedule_s, simulated_efficiency
from strategies import Replay, Search, cache_paths, replay

from mpitune import strategies
from mpitune.model.problem import Schedule
from mpitune.model.result import Result
from mpitune.scheduling.batching import PER_RANK_PREDICTABLE, deal, deal_by_cost
from mpitune.scheduling.costs import CostModel
from mpitune.spec.settings import default_strategy
from mpitune.store.reader import read


def refill(cache: Replay, name: str, seed: int, budgets: list[int], ranks: int) -> Search:
    """One search by the ``refill`` rule (module docstring), on the cache's recorded costs."""
    strategy = strategies.create(name, cache.space, seed, {})
    costs = CostModel(cache.space)
    quorum = max(1, ranks // 2)
    held: list[list[int]] = [[] for _ in range(ranks)]  # handed out and not yet reported, in order
    predicted_free_s = np.zeros(ranks)  # when rank 0 expects each rank to be done with what it holds
    free_s = np.zeros(ranks)  # when each rank is done with what it holds
    events: list[tuple[float, int, int]] = []  # (done, rank, id)
    handed: list[int] = []
    largest, asking = max(budgets), 0.0

    def hand_out(now_s: float) -> None:
        nonlocal asking
        while len(handed) < largest:
            wanting = [r for r in range(ranks) if len(held[r]) < 2]
            if len(wanting) < quorum and any(held):
                return
            t0 = time.perf_counter()
            ids = strategy.ask(min(len(wanting), largest - len(handed)))
            asking += time.perf_counter() - t0
            if not ids:
                return
            handed.extend(ids)
            predicted = costs.predict_s(ids)
            if predicted is not None:  # the costliest to the rank free first
                ids = [ids[i] for i in np.argsort(-np.asarray(predicted), kind="stable")]
                predicted = sorted(predicted, reverse=True)
            firsts = sorted(wanting, key=lambda r: (max(predicted_free_s[r], now_s), r))
            for k, (rank, i) in enumerate(zip(firsts, ids)):
                free_s[rank] = max(free_s[rank], now_s) + cache.cost_s[i]
                guess_s = predicted[k] if predicted is not None else cache.cost_s[i]
                predicted_free_s[rank] = max(predicted_free_s[rank], now_s) + guess_s
                held[rank].append(i)
                heapq.heappush(events, (float(free_s[rank]), rank, i))

    hand_out(0.0)
    wall_s = 0.0
    while events:
        wall_s, rank, i = heapq.heappop(events)
        held[rank].remove(i)
        if not held[rank]:
            predicted_free_s[rank] = wall_s
        strategy.tell([cache.result(i)])
        costs.learn([Result(i, cache.status[i], compile_s=float(cache.cost_s[i]))])
        hand_out(wall_s)
    best = np.minimum.accumulate(np.where(np.isnan(cache.time_ms[handed]), np.inf, cache.time_ms[handed]))
    scores = {b: cache.score(float(best[min(b, len(best)) - 1])) for b in budgets}
    return Search(scores, wall_s, float(cache.cost_s[handed].sum()), asking / max(len(handed), 1))


Rule = Callable[[Replay, str, int, list[int], int], Search]

RULES: dict[str, Rule] = {
    "now": lambda c, n, s, b, r: replay(c, n, s, b, r),
    "rank 0 beside": lambda c, n, s, b, r: replay(c, n, s, b, r, rank0_after=False),
    "two per rank": lambda c, n, s, b, r: replay(c, n, s, b, r, per_batch=2 * r),
    "refill": refill,
}


def table(cache_dir: str, args: argparse.Namespace) -> str:
    """The table of one directory of caches; its largest cache (the most configurations)."""
    paths = cache_paths(cache_dir)
    name = default_strategy(has_budget=True)
    runs: dict[str, list[list[Search]]] = {rule: [] for rule in RULES}
    sizes = {}
    for path in paths:
        cache = Replay.load(path)
        sizes[path] = len(cache.space)
        for rule, run in RULES.items():
            runs[rule].append([run(cache, name, seed, args.budgets, args.ranks) for seed in range(args.seeds)])
    print(f"## {cache_dir}: {name}, {len(paths)} caches\n")
    print("| rule | " + " | ".join(str(b) for b in args.budgets) + " | wall / 1 rank | (worst cache) |")
    print("|---" * (len(args.budgets) + 3) + "|")
    for rule, per_cache in runs.items():
        scores = [np.mean([[s.scores[b] for s in seeds] for seeds in per_cache]) for b in args.budgets]
        walls = [(sum(s.wall_s for s in seeds), sum(s.serial_s for s in seeds)) for seeds in per_cache]
        overall = sum(w for w, _ in walls) / sum(s for _, s in walls)
        worst = max(w / s for w, s in walls)
        print(f"| {rule} | " + " | ".join(f"{v:.3f}" for v in scores) + f" | {overall:.4f} | {worst:.4f} |")
    print()
    return max(sizes, key=sizes.__getitem__)


def brute_force(path: str, ranks: list[int]) -> None:
    """Batches against pulling, by brute force on one cache (module docstring)."""
    print(f"## brute force, {os.path.basename(path)}: racing on, as run\n")
    print(
        "| ranks | the scheduler (simulated, refill) | batches, exact costs, two in flight, rank 0 after"
        " | the same, rank 0 beside | pulled, no batches |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for n in ranks:
            run = simulated_efficiency(path, workdir, n, None, True, Schedule.AUTO)
            results = read(run["path"]).results
            cost = np.zeros(int(results["config_id"].max()) + 1)  # as raced in that run
            cost[results["config_id"]] = results["compile_s"] + results["verify_s"] + results["benchmark_s"]
            cells = [100 * run["efficiency"]]
            for rank0_after in (True, False):
                cells.append(100 * cost.sum() / (n * batches_s(cost, n, rank0_after)))
            cells.append(100 * cost.sum() / (n * list_schedule_s(cost, n)))
            print(f"| {n} | " + " | ".join(f"{c:.1f} %" for c in cells) + " |")
    print()


def batches_s(cost: np.ndarray, ranks: int, rank0_after: bool) -> float:
    """The wall of brute force in the scheduler's batches (two of one per rank, dealt blind, then
    ``PER_RANK_PREDICTABLE`` per rank dealt by the exact costs), two in flight."""
    size = PER_RANK_PREDICTABLE * ranks
    bounds = [0, ranks, 2 * ranks, *range(2 * ranks + size, len(cost), size), len(cost)]
    free_s, gathered_s = np.zeros(ranks), [0.0, 0.0]
    for k, (first, last) in enumerate(pairwise(bounds)):
        ids = list(range(first, last))
        chunks = deal(ids, ranks, k) if k < 2 else deal_by_cost(ids, cost[ids], ranks)
        start_s = np.maximum(free_s, gathered_s[-2])
        if rank0_after and k:  # rank 0 starts its chunk once it has recorded the batch before
            start_s[0] = max(start_s[0], gathered_s[-1])
        free_s = start_s + np.array([cost[chunk].sum() for chunk in chunks])
        gathered_s.append(float(free_s.max()))
    return gathered_s[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dirs", nargs="+", help="one table per directory")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200, 400])
    parser.add_argument("--brute-force-ranks", type=int, nargs="*", default=[64, 256])
    args = parser.parse_args()
    args.budgets = sorted(args.budgets)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"ranks: {args.ranks}, seeds 0..{args.seeds - 1}\n")
    started = time.perf_counter()
    largest = [table(cache_dir, args) for cache_dir in args.cache_dirs]
    if args.brute_force_ranks:
        brute_force(largest[0], args.brute_force_ranks)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
