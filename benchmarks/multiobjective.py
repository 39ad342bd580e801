"""How much of the true Pareto front each strategy finds on the real measured caches, replayed
in-process with two objectives: the kernel time and the threads per block, both lower is better.

    python benchmarks/multiobjective.py CACHE_DIR [--ranks 8] [--budgets 50 100 200] [--repeats 10]
        [--depth 2] [--strategies nsga2 random_sample genetic_algorithm]

The threads per block are a metric computed from the configuration, as a spec would define it
(an expression: the product of the ``block_size_*`` parameters, ``MDIMC * NDIMC`` for the gemm
cache), so the replay needs only the measured times. Each cache is replayed as
benchmarks/strategies.py does it (``Replay``): batches of ``min(ranks, budget left)`` ids, results
scored by the run's ``Objective`` (one score per objective) and told back, batch b asked once
batch b - ``--depth`` is told (2 by default, as the scheduler runs more than one rank). The true
front is found by brute force over every valid configuration of the cache; the score of a search is the
hypervolume of what it measured divided by that of the true front, with one reference point for
both: the worst value of each objective over the valid configurations. 1 is the whole front.
Prints, per cache, the mean ratio over the seeds at every budget (and the worst seed) and the share
of the true front's configurations measured at the largest budget, then the means over the caches.
"""

from __future__ import annotations

import argparse
import copy
import glob
import os
import shlex
import sys
import time

import numpy as np
from strategies import Replay  # benchmarks/strategies.py: a cache as arrays by config id

from mpitune import strategies
from mpitune.model.judging.pareto import front_mask, hypervolume, oriented
from mpitune.model.objective import Objective, expression
from mpitune.model.result import Result

DIRECTIONS = (False, False)  # time and threads per block: lower is better


def threads_metric(params: list[str]) -> str:
    """The expression of the threads per block in a cache's parameters."""
    blocks = [p for p in params if p.startswith("block_size_")]
    if blocks:
        return " * ".join(blocks)
    if {"MDIMC", "NDIMC"} <= set(params):  # CLBlast's gemm: an MDIMC x NDIMC thread block
        return "MDIMC * NDIMC"
    raise SystemExit(f"no thread-block parameters among {params}")


class Problem:
    """A replayed cache with its two-objective ``Objective`` and the brute-force front."""

    def __init__(self, path: str):
        self.cache = Replay.load(path)
        space = self.cache.space
        params = list(space.tune_params)
        self.metric = threads_metric(params)
        self.objective = Objective(["time", "threads"], DIRECTIONS, [expression("threads", self.metric, {})])
        self.results = [self.evaluate(i) for i in range(len(space))]  # every configuration, scored once
        values = np.array([[r.time_ms, r.metrics["threads"]] if r.ok else [np.nan] * 2 for r in self.results])
        self.points = oriented(values, DIRECTIONS)
        valid = np.isfinite(self.points).all(axis=1)
        self.reference = self.points[valid].max(axis=0)
        self.front = set(np.flatnonzero(front_mask(self.points)).tolist())
        self.true = hypervolume(self.points, self.reference)

    def evaluate(self, config_id: int) -> Result:
        c = self.cache
        result = Result(config_id, c.status[config_id], time_ms=float(c.time_ms[config_id]))
        return self.objective.evaluate(result, c.space.config(config_id))

    def ratio(self, ids: list[int]) -> float:
        return hypervolume(self.points[ids], self.reference) / self.true


def search(
    problem: Problem, name: str, seed: int, budgets: list[int], ranks: int, depth: int = 2
) -> tuple[dict[int, float], float]:
    """The hypervolume ratio at every budget from one search, as benchmarks/strategies.py's
    ``replay`` does it (batch b asked once batch b - ``depth`` is told; a smaller budget's last,
    partial batch is asked of a copy), and the share of the true front measured by the largest
    budget."""
    strategy = strategies.create(name, problem.cache.space, seed, {})
    measured: list[int] = []
    batches: list[list[int]] = []
    ratios: dict[int, float] = {}
    largest = max(budgets)
    while len(measured) < largest:
        while len(batches) >= depth:
            strategy.tell([copy.copy(problem.results[i]) for i in batches.pop(0)])
        for budget in budgets:
            if len(measured) < budget < len(measured) + ranks and budget < largest:
                ratios[budget] = problem.ratio(measured + copy.deepcopy(strategy).ask(budget - len(measured)))
        ids = strategy.ask(min(ranks, largest - len(measured)))
        if not ids:
            break
        measured += ids
        batches.append(ids)
        if len(measured) in budgets:
            ratios[len(measured)] = problem.ratio(measured)
    for budget in budgets:
        ratios.setdefault(budget, problem.ratio(measured))
    return ratios, len(problem.front & set(measured)) / len(problem.front)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dir")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--depth", type=int, default=2, help="batches in flight, as in benchmarks/strategies.py")
    parser.add_argument("--strategies", nargs="+", default=["nsga2", "random_sample", "genetic_algorithm"])
    args = parser.parse_args()
    budgets = sorted(args.budgets)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"ranks: {args.ranks}, depth: {args.depth}, repeats: {args.repeats} (seeds 0..{args.repeats - 1});")
    print("objectives: time and threads per block, both lower is better;")
    print("hypervolume found / true (reference: the worst of each)\n")
    started = time.perf_counter()
    patterns = ("*.json", "*.json.gz", "*.h5")
    paths = sorted(p for pattern in patterns for p in glob.glob(os.path.join(args.cache_dir, pattern)))
    means: dict[str, list[list[float]]] = {name: [] for name in args.strategies}
    header = "| strategy | " + " | ".join(f"{b}" for b in budgets) + f" | true front found @{budgets[-1]} |"
    rule = "|---" * (len(budgets) + 2) + "|"
    for path in paths:
        problem = Problem(path)
        print(
            f"### {problem.cache.name}: {len(problem.cache.space)} configurations, threads = {problem.metric}, "
            f"true front {len(problem.front)} configurations\n"
        )
        print(header)
        print(rule)
        for name in args.strategies:
            runs = [search(problem, name, seed, budgets, args.ranks, args.depth) for seed in range(args.repeats)]
            cells = [np.array([ratios[b] for ratios, _ in runs]) for b in budgets]
            found = float(np.mean([share for _, share in runs]))
            means[name].append([float(c.mean()) for c in cells] + [found])
            print(f"| {name} | " + " | ".join(f"{c.mean():.3f} ({c.min():.3f})" for c in cells) + f" | {found:.2f} |")
        print()
    print(f"### mean over {len(paths)} caches\n")
    print(header)
    print(rule)
    for name in args.strategies:
        *ratios, found = np.mean(means[name], axis=0)
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in ratios) + f" | {found:.2f} |")
    print(f"\n(mean over the seeds, the worst seed in parentheses; {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
