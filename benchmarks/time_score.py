"""The benchmark hub's score: how far ahead of random search a search is, averaged over time.

    PYTHONPATH=. python benchmarks/time_score.py CACHE_DIR [CACHE_DIR ...] [--ranks 1 8]
        [--repeats 3] [--strategy portfolio] [--cutoff 0.95] [--start 0.01]

Scores over evaluations (benchmarks/strategies.py) hide what an evaluation costs; mpitune's
cost less than Kernel Tuner's (racing, compiling ahead, several ranks), so a fair comparison is
over time. This follows the methodology of the AutoTuningAssociation's benchmark hub (Willemsen,
van Nieuwpoort, van Werkhoven, FGCS 2024), written from its description:

- **Random search** without replacement on one device is the baseline: its expected best
  after M evaluations, drawn from all N configurations, failed ones included (they cost time
  and find nothing). The k-th best valid time is the best drawn with probability
  C(N - k, M - 1) / C(N, M); where nothing valid is drawn it counts as the median. At time t
  it has made t / (mean cost of a configuration) evaluations. (The hub takes the time at the
  expected rank of the best, (N + 1) / (M + 1), instead: the rank of the best of M draws is
  skewed towards the best, so on spaces with many near-best configurations that value is
  slower than what random search finds on average, and random search itself scored up to 0.43
  against it here. The expected value scores random search 0 on average.)
- **The time range** runs from when random search is expected to reach the ``--start``
  cutoff to when it reaches ``--cutoff``: the cutoff p is the time optimum + (median -
  optimum) * (1 - p), and random search needs ceil(i / (N + 1 - i)) evaluations for it, i
  the valid configurations slower than it, at the median cost each.
- **The score** at time t is (S(t) - R(t)) / (optimum - R(t)), S the best the search has
  found by then (the median before its first valid result, its last best after it stops) and
  R random search's: 0 is random search, 1 the optimum found at once, below 0 worse than
  random search, with no lower bound (a search still at the median while random search is
  close to the optimum scores far below 0). The cache's score is its mean over 1,000 points of the range; a directory's,
  the mean over its caches.

Each search is the real scheduler on the simulated clock (``scheduling.run.simulate``, what
``plan`` runs) with default settings but the strategy, on ``--ranks`` ranks, with a time limit
at the range's end: a configuration's time is when its result reached rank 0 (``finished_s``).
Its best is judged by the cache's own time for each configuration handed out, as
benchmarks/strategies.py judges (a raced result's recorded median is biased upwards).
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from kt_strategies import kt_copy, kt_run
from strategies import cache_paths

from mpitune.scheduling.run import simulate
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store.measured import MeasuredData, load
from mpitune.store.reader import read

RESOLUTION = 1000  # points of the time range a score is averaged over


@dataclass(frozen=True)
class Space:
    """What the baseline needs of a cache: its valid times, best first, and the costs."""

    sorted_ms: np.ndarray  # valid times, ascending
    configurations: int  # all of them, failed ones included
    mean_cost_s: float  # compile + verify + benchmark, over every configuration
    median_cost_s: float

    @classmethod
    def of(cls, data: MeasuredData) -> Space:
        times = np.array([m.time_ms for m in data.measurements if m.status == "ok" and math.isfinite(m.time_ms)])
        costs = np.array([m.compile_s + m.verify_s + m.benchmark_s for m in data.measurements])
        return cls(np.sort(times), len(costs), float(np.mean(costs)), float(np.median(costs)))

    @property
    def optimum_ms(self) -> float:
        return float(self.sorted_ms[0])

    @property
    def median_ms(self) -> float:
        return float(np.median(self.sorted_ms))

    def random_best_ms(self, evaluations: np.ndarray) -> np.ndarray:
        """Random search's expected best after each count of evaluations (rounded, at least 1;
        module docstring)."""
        n = self.configurations
        draws = np.clip(np.round(evaluations), 1, n).astype(np.int64)
        log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])

        def log_choose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.where(b <= a, log_factorial[a] - log_factorial[b] - log_factorial[np.maximum(a - b, 0)], -np.inf)

        k = np.arange(1, len(self.sorted_ms) + 1)
        out = {}
        for m in np.unique(draws):
            p = np.exp(log_choose(n - k, np.full_like(k, m - 1)) - log_choose(np.array(n), np.array(m)))
            nothing = max(0.0, 1.0 - float(p.sum()))  # only failed configurations drawn
            out[int(m)] = float(p @ self.sorted_ms) + nothing * self.median_ms
        return np.array([out[int(m)] for m in draws])

    def cutoff_s(self, percentile: float) -> float:
        """When random search is expected to reach the cutoff ``percentile`` (module docstring)."""
        target = self.optimum_ms + (self.median_ms - self.optimum_ms) * (1 - percentile)
        n = len(self.sorted_ms)
        slower = int(np.count_nonzero(self.sorted_ms > target))
        return math.ceil(slower / (n + 1 - slower)) * self.median_cost_s

    def time_range_s(self, start: float, cutoff: float) -> np.ndarray:
        return np.linspace(self.cutoff_s(start), self.cutoff_s(cutoff), RESOLUTION)


def best_over_time(finished_s: np.ndarray, time_ms: np.ndarray, at_s: np.ndarray, before_ms: float) -> np.ndarray:
    """The best valid time found by each of ``at_s`` (``before_ms`` before the first)."""
    order = np.argsort(finished_s, kind="stable")
    done_s = finished_s[order]
    running = np.minimum.accumulate(np.where(np.isfinite(time_ms[order]), time_ms[order], np.inf))
    found = np.searchsorted(done_s, at_s, side="right")  # results in by each time
    best = np.where(found > 0, running[np.maximum(found - 1, 0)], np.inf)
    return np.where(np.isfinite(best), best, before_ms)


def hub_score(space: Space, finished_s: np.ndarray, time_ms: np.ndarray, at_s: np.ndarray) -> float:
    """The mean over ``at_s`` of (S - R) / (optimum - R) (module docstring)."""
    searched = best_over_time(finished_s, time_ms, at_s, space.median_ms)
    random = space.random_best_ms(at_s / space.mean_cost_s)
    gap = space.optimum_ms - random  # <= 0
    level = np.where(searched <= space.optimum_ms, 1.0, 0.0)  # where random search is at the optimum too
    apart = gap < 0
    level[apart] = (searched[apart] - random[apart]) / gap[apart]
    return float(np.mean(level))


def _ours(path: str, data: MeasuredData, strategy: str, ranks: int, limit_s: float, seed: int) -> tuple:
    return search(path, data, strategy, ranks, seed, limit_s)


def _theirs(path: str, strategy: str, limit_s: float, timeout_s: float, folder: str, seed: int) -> tuple:
    return kt_search(path, strategy, seed, limit_s, timeout_s, folder)


def search(path: str, data: MeasuredData, strategy: str, ranks: int, seed: int, limit_s: float) -> tuple:
    """(finished_s, time_ms) of each configuration one simulated search handed out and measured."""
    given = Overrides(strategy=strategy, seed=seed, time_limit_s=limit_s)
    problem, settings = replay_problem(data, given, strategy)
    by_config = data.lookup()
    with tempfile.TemporaryDirectory(prefix="mpitune-time-score-") as workdir:
        simulate(problem, settings, ranks, workdir)
        results = read(os.path.join(workdir, f"plan-{ranks}.h5")).results
    names = list(data.tune_params)
    own_ms = []
    for row in results:
        measured = by_config[tuple(_plain(row[n]) for n in names)]
        own_ms.append(measured.time_ms if measured.status == "ok" else math.nan)
    return np.asarray(results["finished_s"], dtype=np.float64), np.array(own_ms, dtype=np.float64)


def kt_search(path: str, strategy: str, seed: int, limit_s: float, timeout_s: float, folder: str) -> tuple:
    """(finished_s, time_ms) of each entry of one Kernel Tuner 1.5.0 run in simulation mode on
    one device, stopped by its own time limit at ``limit_s`` simulated seconds (or after
    ``timeout_s`` of wall time): each entry done when the cache's compile, verification and
    benchmark times before it have passed. Its strategy and framework times are left out, as
    the scheduler's simulated clock leaves out rank 0's strategy on a Kernel Tuner cache."""
    run = kt_run(kt_copy(path, folder), os.path.basename(path), strategy, 0, seed, timeout_s, limit_s)
    if run.error:
        raise RuntimeError(f"Kernel Tuner's {strategy} on {path}: {run.error}")
    return np.cumsum(run.costs_ms) / 1e3, np.array(run.times_ms, dtype=np.float64)


def _plain(value: object) -> object:
    """A value read from the file as the cache's configurations spell it."""
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if isinstance(value, np.generic) else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="folders of measured caches")
    parser.add_argument(
        "--ranks", type=int, nargs="*", default=[1, 8], help="rank counts (default 1 8; none: Kernel Tuner only)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="seeds 0..K-1 (default 3)")
    parser.add_argument("--strategy", default="portfolio", help="the strategy (default portfolio, the default)")
    parser.add_argument("--cutoff", type=float, default=0.95, help="the range's end (default 0.95)")
    parser.add_argument("--start", type=float, default=0.01, help="the range's start (default 0.01)")
    parser.add_argument(
        "--kt-strategies", nargs="*", default=[], help="Kernel Tuner 1.5.0 strategies to score beside, on one device"
    )
    parser.add_argument("--run-timeout-s", type=float, default=90.0, help="wall limit of one Kernel Tuner run")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    print("command: PYTHONPATH=. python " + shlex.join(["benchmarks/time_score.py", *given]))
    started = time.perf_counter()
    for folder in args.dirs:
        print(f"\n{folder}: {args.strategy}, the hub's score over time, mean of {args.repeats} seeds")
        columns = [f"{n} rank{'s' * (n > 1)}" for n in args.ranks] + [f"KT {k}, 1 device" for k in args.kt_strategies]
        print("| cache | range (s) | " + " | ".join(columns) + " |")
        print("|---|---|" + "---|" * len(columns))
        means: dict[str, list[float]] = {c: [] for c in columns}
        for path in cache_paths(folder):
            data = load(path)
            space = Space.of(data)
            at_s = space.time_range_s(args.start, args.cutoff)
            runs: dict[str, Callable[[int], tuple]] = {
                f"{n} rank{'s' * (n > 1)}": functools.partial(_ours, path, data, args.strategy, n, float(at_s[-1]))
                for n in args.ranks
            }
            with tempfile.TemporaryDirectory(prefix="mpitune-time-score-kt-") as folder_kt:
                for k in args.kt_strategies:
                    runs[f"KT {k}, 1 device"] = functools.partial(
                        _theirs, path, k, float(at_s[-1]), args.run_timeout_s, folder_kt
                    )
                for column, run in runs.items():
                    scores = [hub_score(space, *run(seed), at_s) for seed in range(args.repeats)]
                    means[column].append(float(np.mean(scores)))
            name = os.path.basename(path).split(".")[0]
            cells = " | ".join(f"{means[c][-1]:.3f}" for c in columns)
            print(f"| {name} | {at_s[0]:.1f}-{at_s[-1]:.1f} | {cells} |", flush=True)
        print("| mean | | " + " | ".join(f"{np.mean(means[c]):.3f}" for c in columns) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    logging.getLogger("mpitune").setLevel(logging.ERROR)  # the replays' own warnings (device factors)
    raise SystemExit(main())
