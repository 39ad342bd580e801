"""How work is handed out: refilling the ranks (the default on several ranks) against batches,
for a learning search, measured with the scheduler itself.

    PYTHONPATH=. python benchmarks/refill.py CACHE_DIR [CACHE_DIR ...] [--ranks 8] [--budget 400]
        [--seeds 3] [--strategy portfolio] [--brute-force-ranks N [N ...]]
        [--kernel-cache shared|node|off]

Each measured cache (``*.json``, ``*.json.gz``, ``*.h5``) of each directory is replayed by the
real rounds of the scheduler, every rank in this process on its own simulated clock
(``scheduling.run.simulate``, what ``python -m mpitune plan`` runs): on one rank, then on
``--ranks`` ranks with ``--schedule batches`` and with ``--schedule refill`` (what ``auto``, the
default, is on several ranks: scheduling/handouts.py's ``Policy``), ``--budget`` evaluations
each, once per seed. Printed per cache and over each directory: the simulated wall on the ranks
as a share of the same search's wall on one rank (mean over seeds), and the score of the
search: the best time found over the cache's best (1.0: found it).

``--kernel-cache`` is the replay's (docs/performance.md): whether a candidate timed again by a
rank that did not compile it is loaded from a kernel cache every node sees (``shared``, a home
folder on NFS as on DAS-6) or compiled again (``node``); by default, as this machine's folder is.

With ``--brute-force-ranks N [N ...]``, then brute force over the largest cache of the first
directory on each N ranks, with batches and refilled (benchmarks/replay_rounds.py's
``simulated_efficiency``, racing on, rank 0 measuring in its lane by either policy): compile +
verify + benchmark seconds over ranks x simulated wall, and the wall.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import tempfile
import time

import numpy as np
from replay_rounds import simulated_efficiency
from strategies import cache_paths

from mpitune.model.problem import Schedule
from mpitune.scheduling.run import simulate
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store.measured import load
from mpitune.store.reader import read

SCHEDULES = (Schedule.BATCHES, Schedule.REFILL)  # the comparison; refill is what auto (the default) runs


def score(path: str, data_best_ms: float) -> float:
    """The best time a replay found, over the cache's best."""
    results = read(path).results
    ok = results[np.char.strip(results["status"].astype(str)) == "ok"]
    return data_best_ms / float(np.min(ok["time_ms"])) if len(ok) else 0.0


def one(
    path: str, ranks: int, budget: int, seed: int, schedule: Schedule, strategy: str, workdir: str, reach: str | None
) -> tuple:
    """The simulated wall and score of one replay."""
    data = load(path)
    given = Overrides(max_fevals=budget, seed=seed, schedule=schedule.value)
    problem, settings = replay_problem(data, given, strategy, kernel_cache=reach)
    times = [m.time_ms for m in data.measurements if np.isfinite(m.time_ms)]
    with tempfile.TemporaryDirectory(prefix="mpitune-refill-", dir=workdir) as own:
        simulated = simulate(problem, settings, ranks, own)
        return simulated.wall_s, score(os.path.join(own, f"plan-{ranks}.h5"), float(min(times)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--strategy", default="portfolio")
    parser.add_argument("--brute-force-ranks", type=int, nargs="*", default=[])
    parser.add_argument("--kernel-cache", choices=("shared", "node", "off"), help="default: as the folder is")
    args = parser.parse_args()
    reach = args.kernel_cache
    print("command: PYTHONPATH=. python " + " ".join(shlex.quote(a) for a in sys.argv))
    started = time.perf_counter()
    for cache_dir in args.dirs if args.seeds else []:  # --seeds 0: brute force only
        shares: dict[Schedule, list[float]] = {s: [] for s in SCHEDULES}
        scores: dict[Schedule, list[float]] = {s: [] for s in SCHEDULES}
        print(
            f"\n{cache_dir}: {args.budget} evaluations of {args.strategy}, "
            f"{args.ranks} ranks / 1 rank, {args.seeds} seeds"
        )
        print(f"{'cache':32} {'batches':>8} {'refill':>8} {'score b':>8} {'score r':>8}  (refill: the default)")
        for path in cache_paths(cache_dir):
            row: dict[Schedule, tuple[list[float], list[float]]] = {s: ([], []) for s in SCHEDULES}
            for seed in range(args.seeds):
                with tempfile.TemporaryDirectory(prefix="mpitune-refill-") as workdir:
                    one_s, _ = one(path, 1, args.budget, seed, Schedule.BATCHES, args.strategy, workdir, reach)
                    for schedule in SCHEDULES:
                        wall_s, found = one(
                            path, args.ranks, args.budget, seed, schedule, args.strategy, workdir, reach
                        )
                        row[schedule][0].append(wall_s / one_s)
                        row[schedule][1].append(found)
            for schedule in SCHEDULES:
                shares[schedule].append(float(np.mean(row[schedule][0])))
                scores[schedule].append(float(np.mean(row[schedule][1])))
            name = os.path.basename(path).split(".")[0]
            b, r = (float(np.mean(row[s][0])) for s in SCHEDULES)
            sb, sr = (float(np.mean(row[s][1])) for s in SCHEDULES)
            print(f"{name:32} {b:8.4f} {r:8.4f} {sb:8.3f} {sr:8.3f}", flush=True)
        b, r = (float(np.mean(shares[s])) for s in SCHEDULES)
        sb, sr = (float(np.mean(scores[s])) for s in SCHEDULES)
        print(f"{'mean':32} {b:8.4f} {r:8.4f} {sb:8.3f} {sr:8.3f}")
        print(f"{'worst':32} {max(shares[SCHEDULES[0]]):8.4f} {max(shares[SCHEDULES[1]]):8.4f}")
    if args.brute_force_ranks:
        brute_force(max(cache_paths(args.dirs[0]), key=os.path.getsize), args.brute_force_ranks)
    print(f"\n{time.perf_counter() - started:.0f} s")


def brute_force(path: str, ranks: list[int]) -> None:
    """The table of brute force on ``path``: efficiency and simulated wall per schedule."""
    print(f"\nbrute force on {os.path.basename(path)}: efficiency (simulated wall); refill is the default")
    print(f"{'ranks':>6} {'batches':>18} {'refill':>18}")
    for n in ranks:
        cells = []
        for schedule in SCHEDULES:
            with tempfile.TemporaryDirectory(prefix="mpitune-refill-") as workdir:
                run = simulated_efficiency(path, workdir, n, None, True, schedule)
            cells.append(f"{100 * run['efficiency']:.1f} % ({run['wall_s']:.1f} s)")
        print(f"{n:>6} {cells[0]:>18} {cells[1]:>18}", flush=True)


if __name__ == "__main__":
    logging.getLogger("mpitune").setLevel(logging.ERROR)  # the replays' own warnings (device factors)
    main()
