"""How well each strategy tunes the real measured caches, replayed in-process.

    python benchmarks/strategies.py CACHE_DIR [--ranks 8] [--budgets 20 50 100 200 400] [--repeats 20]

Replays every Kernel Tuner cache (``*.json``, ``*.json.gz``) and mpitune file (``*.h5``) in
CACHE_DIR without MPI: each round asks the strategy for ``min(ranks, budget left)`` ids, as
the scheduler does, deals them to the simulated ranks interleaved, answers them from the
measurements and tells the results. The round's simulated wall time is the largest sum of
compile + verify + benchmark seconds over the ranks, so the total is what the run would have
taken on that many GPUs; "1 rank" is the sum over all configurations.

Score = (median valid time - best found) / (median valid time - optimum), averaged over the
repeats (seeds 0..K-1): 0 is a typical random configuration, 1 the optimum. Prints one
Markdown table per cache and a summary over all caches.
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import sys
import time
from dataclasses import dataclass

import numpy as np

from mpitune import strategies
from mpitune.model.objective import Objective
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace
from mpitune.store import measured

TIME = Objective()  # what the scheduler scores results by: the median time, lower is better


@dataclass
class Replay:
    """One cache as arrays indexed by config id."""
    name: str
    space: SearchSpace
    status: list[str]
    time_ms: np.ndarray  # NaN where the configuration failed
    cost_s: np.ndarray  # compile + verify + benchmark seconds
    median: float
    optimum: float

    @classmethod
    def load(cls, path: str) -> Replay:
        data = measured.load(path)
        space = SearchSpace.from_configs(data.tune_params, data.configs)
        by_config = data.lookup()
        records = [by_config[tuple(space.config(i).values())] for i in range(len(space))]
        time_ms = np.array([m.time_ms if m.status == "ok" else np.nan for m in records])
        cost_s = np.array([m.compile_s + m.verify_s + m.benchmark_s for m in records])
        name = os.path.basename(path).split(".")[0]
        return cls(name, space, [m.status for m in records], time_ms, cost_s,
                   float(np.nanmedian(time_ms)), float(np.nanmin(time_ms)))

    def score(self, best_ms: float) -> float:
        return (self.median - best_ms) / (self.median - self.optimum) if np.isfinite(best_ms) else 0.0


def replay(cache: Replay, strategy_name: str, seed: int, budget: int, ranks: int) -> tuple[float, float, float]:
    """(score, simulated wall seconds on ``ranks`` ranks, seconds on one rank) of one search."""
    strategy = strategies.create(strategy_name, cache.space, seed, {})
    handed, best, wall, serial = 0, np.inf, 0.0, 0.0
    while handed < budget:
        ids = strategy.ask(min(ranks, budget - handed))
        if not ids:
            break
        handed += len(ids)
        wall += max(cache.cost_s[ids[r::ranks]].sum() for r in range(ranks))
        serial += cache.cost_s[ids].sum()
        results = [TIME.evaluate(Result(i, cache.status[i], time_ms=float(cache.time_ms[i])), {}) for i in ids]
        best = min([best] + [r.time_ms for r in results if r.ok])
        strategy.tell(results)
    return cache.score(best), wall, serial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dir")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="+", default=[20, 50, 100, 200, 400])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--strategies", nargs="+", default=strategies.available())
    args = parser.parse_args()
    paths = sorted(p for pattern in ("*.json", "*.json.gz", "*.h5")
                   for p in glob.glob(os.path.join(args.cache_dir, pattern)))
    if not paths:
        sys.exit(f"no caches in {args.cache_dir}")
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"ranks: {args.ranks}, repeats: {args.repeats} (seeds 0..{args.repeats - 1})\n")
    started = time.perf_counter()
    scores: dict[tuple[str, str, int], float] = {}
    for path in paths:
        cache = Replay.load(path)
        print(f"### {cache.name}: {len(cache.space)} configurations, "
              f"{int(np.isnan(cache.time_ms).sum())} failed\n")
        print("| strategy | " + " | ".join(f"{b}" for b in args.budgets)
              + f" | wall s @{args.budgets[-1]}, {args.ranks} ranks | 1 rank | ms per config asked |")
        print("|---" * (len(args.budgets) + 4) + "|")
        for name in args.strategies:
            cells, wall, serial, spent = [], 0.0, 0.0, 0.0
            for budget in args.budgets:
                t0 = time.perf_counter()
                runs = [replay(cache, name, seed, budget, args.ranks) for seed in range(args.repeats)]
                spent = (time.perf_counter() - t0) / (args.repeats * budget)
                scores[cache.name, name, budget] = float(np.mean([r[0] for r in runs]))
                cells.append(f"{scores[cache.name, name, budget]:.3f}")
                wall, serial = np.mean([r[1] for r in runs]), np.mean([r[2] for r in runs])
            print(f"| {name} | " + " | ".join(cells) + f" | {wall:.0f} | {serial:.0f} | {spent * 1e3:.2f} |")
        print()
    caches = sorted({c for c, _, _ in scores})
    print(f"### mean score over {len(caches)} caches\n")
    print("| strategy | " + " | ".join(f"{b}" for b in args.budgets) + " | mean |")
    print("|---" * (len(args.budgets) + 2) + "|")
    for name in args.strategies:
        means = [np.mean([scores[c, name, b] for c in caches]) for b in args.budgets]
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {np.mean(means):.3f} |")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
