"""What other rules for handing out work would gain a learning search on several ranks.

    PYTHONPATH=. python benchmarks/pipelining.py CACHE_DIR [CACHE_DIR ...] [--ranks 8] [--seeds 4]
        [--budgets 50 100 200 400]

The default strategy's searches on each measured cache (``*.json``, ``*.json.gz``, ``*.h5``),
replayed without MPI as benchmarks/strategies.py replays them, under four rules; for each, the
mean score at each budget and the simulated wall time on ``--ranks`` ranks over the same
evaluations on one rank, over all caches of a directory and in the worst one:

- ``now``: what the scheduler does. One configuration per rank per batch, two batches in
  flight (batch b goes out once batch b - 2 is recorded), dealt by predicted cost; rank 0
  records each batch after its own chunk of it, so it waits for the slowest rank every batch.
- ``rank 0 beside``: the same, with rank 0 measuring its chunks beside its gathers, as a worker.
- ``two per rank``: batches of two configurations per rank, rank 0 beside: chunks of two even
  out better, and the strategy learns half as often.
- ``refill``: no batches. Each rank holds the configuration it measures and at most one more;
  whenever half the ranks hold no next one, rank 0 asks the strategy for one per such rank,
  knowing every result reported so far (told one by one as they come, not batch by batch), and
  deals them by predicted cost, the costliest to the rank predicted to be free first. Rank 0
  measures beside, as a worker.

A score at a budget is that of the first ``budget`` configurations handed out. For ``refill`` an
ask that crosses a budget is not repeated smaller as benchmarks/strategies.py does, so its score
there is of a slightly different search than a run of that budget would make.
"""

from __future__ import annotations

import argparse
import glob
import heapq
import os
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np
from strategies import Replay, Search, replay

from mpitune import strategies
from mpitune.model.result import Result
from mpitune.scheduling.costs import CostModel
from mpitune.spec.settings import default_strategy


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
    "two per rank": lambda c, n, s, b, r: replay(c, n, s, b, r, per_batch=2 * r, rank0_after=False),
    "refill": refill,
}


def table(cache_dir: str, args: argparse.Namespace) -> None:
    paths = sorted(
        p for pattern in ("*.json", "*.json.gz", "*.h5") for p in glob.glob(os.path.join(cache_dir, pattern))
    )
    if not paths:
        sys.exit(f"no caches in {cache_dir}")
    name = default_strategy(has_budget=True)
    runs: dict[str, list[list[Search]]] = {rule: [] for rule in RULES}
    for path in paths:
        cache = Replay.load(path)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dirs", nargs="+", help="one table per directory")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200, 400])
    args = parser.parse_args()
    args.budgets = sorted(args.budgets)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"ranks: {args.ranks}, seeds 0..{args.seeds - 1}\n")
    started = time.perf_counter()
    for cache_dir in args.cache_dirs:
        table(cache_dir, args)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
