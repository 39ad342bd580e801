"""Rank 0's time per ask against the results told: does a long search keep up with its ranks?

A 256-rank job on a large space tells its strategy tens of thousands of results. This drives a
strategy as rank 0 does (ask a chunk, tell its results) on a synthetic space (7 parameters of
10 values, 10^7 configurations, a restriction that keeps about half) with a kernel-like
landscape (a smooth valley, a rugged term, a failing corner), and prints, for each stretch of
results told, the mean and the largest time of one ask, in ms, on one core (BLAS limited to
one thread, as rank 0's asks are).

    PYTHONPATH=. python benchmarks/ask_cost.py [--strategy portfolio] [--results 20000] [--chunk 32]

``--chunk`` is the ids per ask (refill's chunk on many ranks); ``--every`` the stretch of
results each line covers.
"""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one core, as rank 0 asks
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from mpitune import strategies
from mpitune.model.objective import Objective
from mpitune.model.restrictions import Restriction
from mpitune.model.result import Result, Scored, Status
from mpitune.model.searchspace import SearchSpace

KERNEL_TIME = Objective()  # the default: the kernel time
PARAMS = {name: list(range(10)) for name in ("a", "b", "c", "d", "e", "f", "g")}


def space() -> SearchSpace:
    return SearchSpace.build(PARAMS, [Restriction("a + b + c <= 13", ["a", "b", "c"])])


def landscape_ms(x: np.ndarray, config_id: int) -> float:
    """A valley in a, b, c; d to g matter less; a corner fails."""
    if x[0] + x[3] >= 16:
        return math.nan
    valley = (x[0] - 4.6) ** 2 + 0.7 * (x[1] - 2.3) ** 2 + 0.8 * (x[2] - 3.4) ** 2 + 0.3 * (x[0] - x[1] - 2) ** 2
    rest = 0.2 * (x[3] - 5) ** 2 + 0.1 * (x[4] - 1) ** 2 + 0.05 * abs(x[5] - x[6])
    return 1.0 + valley + rest + 0.2 * math.sin(7.0 * config_id)


def result(searched: SearchSpace, config_id: int) -> Scored:
    ms = landscape_ms(searched.indices[config_id].astype(float), config_id)
    status = Status.OK if math.isfinite(ms) else Status.RUNTIME_ERROR
    return KERNEL_TIME.evaluate(Result(config_id, status, time_ms=ms if math.isfinite(ms) else math.nan), {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="portfolio", help="the strategy (default portfolio)")
    parser.add_argument("--results", type=int, default=20_000, help="results to tell (default 20,000)")
    parser.add_argument("--chunk", type=int, default=32, help="ids per ask (default 32)")
    parser.add_argument("--every", type=int, default=2_000, help="results per line (default 2,000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    searched = space()
    built_s = time.perf_counter() - started
    strategy = strategies.create(args.strategy, searched, args.seed, {})
    print(
        f"command: python benchmarks/ask_cost.py --strategy {args.strategy} --results {args.results} "
        f"--chunk {args.chunk} --every {args.every} --seed {args.seed}"
    )
    print(f"space: {len(searched):,} configurations, built in {built_s:.1f} s")
    print("| results told | asks | mean ms per ask | largest ms | tell ms per result |")
    print("|---|---|---|---|---|")
    told, asks, ask_s, tell_s, largest_s = 0, 0, 0.0, 0.0, 0.0
    worst_mean_ms = 0.0
    stretch_start = 0
    while told < args.results:
        t0 = time.perf_counter()
        ids = strategy.ask(min(args.chunk, args.results - told))
        t1 = time.perf_counter()
        if not ids:
            break
        batch = [result(searched, i) for i in ids]
        t2 = time.perf_counter()
        strategy.tell(batch)
        t3 = time.perf_counter()
        asks += 1
        ask_s += t1 - t0
        tell_s += t3 - t2
        largest_s = max(largest_s, t1 - t0)
        told += len(ids)
        if told - stretch_start >= args.every or told >= args.results:
            mean_ms = 1e3 * ask_s / asks
            worst_mean_ms = max(worst_mean_ms, mean_ms)
            print(
                f"| {stretch_start:,}-{told:,} | {asks} | {mean_ms:.1f} | {1e3 * largest_s:.1f} "
                f"| {1e3 * tell_s / (told - stretch_start):.3f} |"
            )
            stretch_start, asks, ask_s, tell_s, largest_s = told, 0, 0.0, 0.0, 0.0
    print(f"largest mean per ask over a stretch: {worst_mean_ms:.1f} ms (goal: under 50 ms up to 20,000 results)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
