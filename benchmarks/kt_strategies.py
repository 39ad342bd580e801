"""How well Kernel Tuner 1.5.0's own search strategies tune the caches that strategies.py replays.

    PYTHONPATH=. python benchmarks/kt_strategies.py CACHE_DIR [CACHE_DIR ...] [--budgets 100 200 400]
        [--repeats 5] [--strategies NAME ...] [--jobs 1] [--json PATH] [--run-timeout-s 90]
    PYTHONPATH=. python benchmarks/kt_strategies.py --from-json PATH [--strategies NAME ...]

Run it from the repository root with ``PYTHONPATH=.`` and a Python that has Kernel Tuner 1.5.0
(the wheels in .whl/ are for CPython 3.12) and numpy and scipy; mpi4py is not needed. The
figures were measured so, on one core (about 26 and 17 minutes)::

    python3.12 -m venv /tmp/ktenv
    /tmp/ktenv/bin/pip install numpy scipy h5py .whl/*.whl
    PYTHONPATH=. nice -n 10 /tmp/ktenv/bin/python benchmarks/kt_strategies.py ../shared/data/caches \\
        --budgets 100 200 400 --repeats 5 --jobs 1 --json /tmp/kt_caches.json
    PYTHONPATH=. nice -n 10 /tmp/ktenv/bin/python benchmarks/kt_strategies.py ../shared/data/validation \\
        --budgets 100 200 400 --repeats 5 --jobs 1 --json /tmp/kt_validation.json

``--from-json`` runs nothing and prints the tables of a ``--json`` file again, e.g. the best of a
subset of the strategies.

For every Kernel Tuner cache (``*.json``, ``*.json.gz``) in each CACHE_DIR, every strategy,
every budget and every seed 0..K-1 it makes one ``kernel_tuner.tune_kernel(...,
simulation_mode=True, strategy=NAME, strategy_options={"max_fevals": budget})`` run (one run
per budget: some strategies size themselves by max_fevals), with python's and numpy's global
random state seeded before it (``seed=`` is passed too; only the pymoo strategies read it).
In simulation mode Kernel Tuner answers every configuration from the cache and runs nothing:

* it reads the cache as plain JSON (``.json`` is appended to a path without it), so a
  ``.json.gz`` is decompressed to a temporary folder first;
* it checks the cache's ``kernel_name``, ``problem_size`` and ``tune_params_keys`` (in order)
  against the call, and takes the device name from the cache, so those come from the cache;
* its search space is the Cartesian product of ``tune_params`` less the restrictions, and a
  configuration of that space that the cache lacks raises ValueError; so the one restriction
  passed admits exactly the configurations in the cache, failed ones included: the space that
  strategies.py replays (``Replay.space``; checked per cache). Kernel Tuner's own
  ``tune_cache`` would drop the failed ones from the space instead;
* ``max_fevals`` counts the distinct configurations served from the cache, failed ones
  included (``SimulationRunner.run``: a key not yet in ``visited_results`` calls
  ``budget.add_evaluations(1)``); a configuration asked again is answered again, uncounted,
  and is in the results again. Some strategies stop before the budget on their own.

A run still going after ``--run-timeout-s`` seconds of wall time (default 90) is stopped as
Kernel Tuner stops one at its budget (StopCriterionReached, so the strategy returns what it
has) and scored on that; the tables count such runs. nsga2, for one, can ask the same few
hundred configurations forever in simulation mode, since repeats do not count.

A run's best is the lowest ``time`` that is a number in the results it returns (a failed
configuration's time is the error's name); its score is ``Replay.score`` of strategies.py:
(median valid time - best found) / (median valid time - optimum), 0 for a typical random
configuration, 1 for the optimum, 0 if nothing valid was found. Per directory it prints the
mean score per strategy and budget over the caches and seeds, with the distinct and failed
configurations evaluated and the seconds per run, then "best of N strategies per budget":
for each budget the highest of those means (the strategy may differ per budget), then every
cache's own table and best per budget, and what failed. ``--json`` writes every run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import os
import random
import shlex
import shutil
import signal
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strategies import Replay  # benchmarks/strategies.py: the same median and optimum

KT_VERSION = "1.5.0"
# Kernel Tuner 1.5.0's strategies (kernel_tuner.interface.strategy_map) less brute_force, which
# would evaluate the whole space, and pyatf_strategies, which does not build its space with the
# newest pyatf on PyPI (0.0.13: TP() takes 2 or 3 arguments, Kernel Tuner passes 4) and writes a
# folder pyatf_searchspace_caches into the working directory, and skopt (scikit-optimize 0.10.2),
# which takes minutes per run (129 to 215 s for 100 evaluations of dedispersion_A100,
# convolution_A4000 and gemm_RTX_3090 on one core) and on convolution_A100 and pnpoly_RTX_3090
# raises ValueError in its gp_hedge acquisition (pvals < 0, pvals > 1 or pvals contains NaNs);
# ask for it with --strategies.
DEFAULT_STRATEGIES = [
    "random_sample",
    "minimize",
    "basinhopping",
    "diff_evo",
    "genetic_algorithm",
    "greedy_mls",
    "ordered_greedy_mls",
    "greedy_ils",
    "dual_annealing",
    "mls",
    "pso",
    "simulated_annealing",
    "firefly_algorithm",
    "bayes_opt",
    "hybrid_vndx",
    "adaptive_tabu_greywolf",
    "nsga2",
    "nsga3",
]


@dataclass
class Run:
    """One Kernel Tuner run in simulation mode."""

    cache: str
    strategy: str
    budget: int
    seed: int
    best_ms: float | None = None  # None: nothing valid found, or the run failed
    score: float | None = None  # None: the run failed
    results: int = 0  # entries in the results list, repeats included
    distinct: int = 0  # distinct configurations among them: what max_fevals counts
    failed: int = 0  # distinct configurations among them that the cache marks as failed
    seconds: float = 0.0
    timed_out: bool = False  # stopped by --run-timeout-s, as a time limit stops Kernel Tuner
    error: str | None = None
    # Per entry of the results list, in order: compile + verification + benchmark ms (0 for a
    # repeat, as Kernel Tuner charges it) and the time, NaN where it failed; for time_score.py.
    costs_ms: list[float] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)


@lru_cache(maxsize=4)
def cache_header(kt_path: str) -> tuple[dict[str, Any], frozenset[tuple]]:
    """What ``tune_kernel`` must be called with for this cache, and the configurations in it."""
    with open(kt_path) as f:
        data = json.load(f)
    keys = data["tune_params_keys"]
    configs = frozenset(tuple(entry[k] for k in keys) for entry in data["cache"].values())
    size = data["problem_size"]
    header = {
        "kernel_name": data["kernel_name"],
        "problem_size": (size,) if isinstance(size, int) else tuple(size),
        "tune_params": {k: data["tune_params"][k] for k in keys},  # in the cache's key order
    }
    return header, configs


def in_cache_restriction(configs: frozenset[tuple]) -> Any:
    """One restriction on all parameters that admits exactly the cached configurations, as
    Kernel Tuner's ``util.infer_restrictions_from_cache`` builds its own (which, though, leaves
    out the failed ones)."""
    from constraint import FunctionConstraint

    def in_cache(*values: Any) -> bool:
        return values in configs

    return FunctionConstraint(in_cache)


def check_space(kt_path: str, size: int) -> None:
    """Kernel Tuner's search space for this cache must be the cache's configurations."""
    from kernel_tuner.searchspace import Searchspace

    header, configs = cache_header(kt_path)
    space = Searchspace(header["tune_params"], [in_cache_restriction(configs)], 1_000_000_000)
    if space.size != size or len(configs) != size:
        sys.exit(f"{kt_path}: Kernel Tuner's space has {space.size} configurations, the cache {size}")


class WallLimit:
    """Stops a run that goes on past ``seconds`` of wall time the way Kernel Tuner stops one at its
    budget: StopCriterionReached, raised in the strategy, which then returns what it has. Some
    strategies never reach max_fevals: in simulation mode a configuration asked again is answered
    without counting, and e.g. nsga2 on convolution_A4000 asks the same few hundred forever. If the
    strategy does not return within ``GRACE_S`` more, TimeoutError ends the run."""

    GRACE_S = 10.0

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = 0

    def _fire(self, signum: int, frame: Any) -> None:
        from kernel_tuner.util import StopCriterionReached

        self.fired += 1
        if self.fired == 1:
            signal.setitimer(signal.ITIMER_REAL, self.GRACE_S)
            raise StopCriterionReached(f"wall-clock limit of {self.seconds:g} s per run")
        raise TimeoutError(f"still running {self.GRACE_S:g} s after the wall-clock limit of {self.seconds:g} s")

    def __enter__(self) -> WallLimit:
        if self.seconds > 0:
            signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)


def kt_run(
    kt_path: str, name: str, strategy: str, budget: int, seed: int, timeout_s: float = 0.0, time_limit_s: float = 0.0
) -> Run:
    """One ``tune_kernel`` in simulation mode; its score is filled in by the caller. With
    ``time_limit_s`` the strategy stops at that much simulated time (Kernel Tuner's own
    ``time_limit``, charged from the cache's compile, verification and benchmark times) instead
    of at ``budget`` evaluations."""
    import kernel_tuner

    header, configs = cache_header(kt_path)
    keys = list(header["tune_params"])
    run = Run(name, strategy, budget, seed)
    random.seed(seed)
    np.random.seed(seed)
    started = time.perf_counter()
    limit = WallLimit(timeout_s)
    try:
        # quiet=True still leaves some strategies printing, and most warn: keep the tables clean
        with limit, warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            results, _ = kernel_tuner.tune_kernel(
                header["kernel_name"],
                "",  # simulation mode compiles nothing
                header["problem_size"],
                [],
                header["tune_params"],
                restrictions=[in_cache_restriction(configs)],
                cache=kt_path,
                simulation_mode=True,
                strategy=strategy,
                strategy_options={"time_limit": time_limit_s} if time_limit_s else {"max_fevals": budget},
                verbose=False,
                quiet=True,
                seed=seed,
            )
    except Exception as e:  # a strategy that fails here is reported, not fatal
        run.seconds = time.perf_counter() - started
        run.timed_out = limit.fired > 0
        run.error = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return run
    run.seconds = time.perf_counter() - started
    run.timed_out = limit.fired > 0
    times = [r["time"] for r in results if "__error__" not in r and isinstance(r.get("time"), (int, float))]
    for r in results:
        run.costs_ms.append(sum(float(r.get(k, 0.0)) for k in ("compile_time", "verification_time", "benchmark_time")))
        valid = "__error__" not in r and isinstance(r.get("time"), (int, float))
        run.times_ms.append(float(r["time"]) if valid else math.nan)
    run.best_ms = float(min(times)) if times else None
    run.results = len(results)
    distinct: dict[tuple, bool] = {}
    for r in results:
        distinct.setdefault(tuple(r[k] for k in keys), "__error__" in r)
    run.distinct = len(distinct)
    run.failed = sum(distinct.values())
    return run


def kt_copy(path: str, folder: str) -> str:
    """A path that Kernel Tuner can read: plain JSON whose name ends in .json."""
    if not path.endswith(".gz"):
        return path
    target = os.path.join(folder, os.path.basename(path)[: -len(".gz")])
    with gzip.open(path, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def mean_or_none(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(np.mean(values))


def cell(value: float | None) -> str:
    return "failed" if value is None else f"{value:.3f}"


def best_of(means: dict[str, float | None]) -> tuple[float | None, str]:
    """The highest mean and whose it is, over the strategies none of whose runs failed."""
    scored = {name: m for name, m in means.items() if m is not None}
    if not scored:
        return None, "-"
    name = max(scored, key=lambda n: scored[n])
    return scored[name], name


def summary(cache_dir: str, caches: list[str], runs: list[Run], args: argparse.Namespace) -> None:
    """The tables of one directory: mean over its caches and seeds, best of, per cache, failures."""
    by_key: dict[tuple[str, str, int], list[Run]] = {}
    for r in runs:
        by_key.setdefault((r.cache, r.strategy, r.budget), []).append(r)

    def score(cache: str, name: str, budget: int) -> float | None:
        return mean_or_none([r.score for r in by_key[cache, name, budget]])

    print(f"### mean score over {len(caches)} caches and {args.repeats} seeds in {cache_dir}\n")
    budgets = " | ".join(f"{b}" for b in args.budgets)
    print(
        f"| strategy | {budgets} | distinct evals made @ {' / '.join(f'{b}' for b in args.budgets)}"
        f" | failed @ {args.budgets[-1]}"
        " | s per run | runs timed out |"
    )
    print("|---" * (len(args.budgets) + 5) + "|")
    means: dict[int, dict[str, float | None]] = {b: {} for b in args.budgets}
    for name in args.strategies:
        for b in args.budgets:
            means[b][name] = mean_or_none([score(c, name, b) for c in caches])
        made = [np.mean([r.distinct for c in caches for r in by_key[c, name, b]]) for b in args.budgets]
        failed = np.mean([r.failed for c in caches for r in by_key[c, name, args.budgets[-1]]])
        seconds = np.mean([r.seconds for r in runs if r.strategy == name])
        timed_out = sum(r.timed_out for r in runs if r.strategy == name)
        print(
            f"| {name} | "
            + " | ".join(cell(means[b][name]) for b in args.budgets)
            + " | "
            + " / ".join(f"{m:.0f}" for m in made)
            + f" | {failed:.1f} | {seconds:.2f} | {timed_out} |"
        )
    best = [best_of(means[b]) for b in args.budgets]
    working = sum(all(means[b][n] is not None for b in args.budgets) for n in args.strategies)
    print(
        f"| **best of {working} strategies per budget** | "
        + " | ".join(f"**{cell(value)}** ({name})" for value, name in best)
        + " | | | | |\n"
    )

    print(f"### best strategy per cache and budget in {cache_dir} (mean over {args.repeats} seeds)\n")
    print(f"| cache | {budgets} |")
    print("|---" * (len(args.budgets) + 1) + "|")
    for c in caches:
        cells = []
        for b in args.budgets:
            value, name = best_of({n: score(c, n, b) for n in args.strategies})
            cells.append(f"{cell(value)} ({name})")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()

    for c in caches:
        print(f"#### {c}: mean score over {args.repeats} seeds\n")
        print(f"| strategy | {budgets} |")
        print("|---" * (len(args.budgets) + 1) + "|")
        for name in args.strategies:
            print(f"| {name} | " + " | ".join(cell(score(c, name, b)) for b in args.budgets) + " |")
        print()

    errors: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        if r.error is not None:
            errors.setdefault((r.strategy, r.error), []).append(r)
    stopped: dict[str, list[Run]] = {}
    for r in runs:
        if r.timed_out and r.error is None:
            stopped.setdefault(r.strategy, []).append(r)
    if errors or stopped:
        print(f"### failed and stopped runs in {cache_dir}\n")
        for (name, error), failed in errors.items():
            where = sorted({r.cache for r in failed})
            print(f"- {name}: {len(failed)} runs failed ({', '.join(where)}): {error}")
        for name, late in stopped.items():
            where = ", ".join(
                f"{c} @ {b}: {sum(r.cache == c and r.budget == b for r in late)}"
                for c in sorted({r.cache for r in late})
                for b in args.budgets
                if any(r.cache == c and r.budget == b for r in late)
            )
            distinct = ", ".join(f"{r.distinct}" for r in late)
            print(
                f"- {name}: {len(late)} runs stopped at the wall-clock limit of {args.run_timeout_s:g} s and scored"
                f" on what they had found ({where}; distinct configurations evaluated: {distinct})"
            )
        print()


def reprint(args: argparse.Namespace) -> None:
    """The tables of a --json file again, e.g. for a subset of the strategies."""
    with open(args.from_json) as f:
        data = json.load(f)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"tables from {args.from_json}, written by: python " + " ".join(shlex.quote(a) for a in data["command"]))
    args.run_timeout_s = data.get("run_timeout_s", args.run_timeout_s)
    dirs = list(dict.fromkeys(r["cache_dir"] for r in data["runs"]))
    for cache_dir in args.cache_dirs or dirs:
        kept = [r for r in data["runs"] if r["cache_dir"] == cache_dir]
        args.repeats = len({r["seed"] for r in kept})
        runs = [
            Run(**{k: v for k, v in r.items() if k != "cache_dir"})
            for r in kept
            if r["strategy"] in args.strategies and r["budget"] in args.budgets
        ]
        print(f"Kernel Tuner {data['kernel_tuner']}, repeats: {args.repeats}\n\n## {cache_dir}\n")
        summary(cache_dir, list(dict.fromkeys(r.cache for r in runs)), runs, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dirs", nargs="*", help="one set of tables per directory")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--repeats", type=int, default=5, help="seeds 0..K-1")
    parser.add_argument("--strategies", nargs="+", default=DEFAULT_STRATEGIES)
    parser.add_argument("--jobs", type=int, default=1, help="processes; 1 runs everything in this one")
    parser.add_argument("--json", help="write every run here")
    parser.add_argument(
        "--run-timeout-s",
        type=float,
        default=90.0,
        help="stop a run after this many seconds of wall time, as a time limit would (0: never)",
    )
    parser.add_argument(
        "--from-json",
        help="run nothing: print the tables again from a --json file, for the --strategies and --budgets given",
    )
    args = parser.parse_args()
    args.budgets = sorted(args.budgets)
    if args.from_json:
        reprint(args)
        return
    if not args.cache_dirs:
        parser.error("give a CACHE_DIR, or --from-json")

    import kernel_tuner  # after argparse, so --help works without it

    version = getattr(kernel_tuner, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("kernel_tuner")
    if version != KT_VERSION:
        print(f"warning: Kernel Tuner {version}, not {KT_VERSION}", file=sys.stderr)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(
        f"Kernel Tuner {version}, repeats: {args.repeats} (seeds 0..{args.repeats - 1}), jobs: {args.jobs},"
        f" wall-clock limit per run: {args.run_timeout_s:g} s\n"
    )
    started = time.perf_counter()
    everything: list[dict[str, Any]] = []
    json_path = os.path.abspath(args.json) if args.json else None
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="kt_strategies_") as folder:
        # the runs' working directory: pyatf_strategies, asked for, writes a folder into it
        os.chdir(folder)
        for cache_dir in args.cache_dirs:
            where = os.path.join(home, cache_dir)
            paths = sorted(os.path.join(where, p) for p in os.listdir(where) if p.endswith((".json", ".json.gz")))
            if not paths:
                sys.exit(f"no Kernel Tuner caches in {cache_dir}")
            print(f"## {cache_dir}\n")
            replays: dict[str, Replay] = {}
            kt_paths: dict[str, str] = {}
            for path in paths:
                replay = Replay.load(path)
                replays[replay.name] = replay
                kt_paths[replay.name] = kt_copy(path, folder)
                check_space(kt_paths[replay.name], len(replay.space))
                failed = int(np.isnan(replay.time_ms).sum())
                print(f"- {replay.name}: {len(replay.space)} configurations, {failed} failed")
            print()
            tasks = [
                (kt_paths[name], name, strategy, budget, seed, args.run_timeout_s)
                for name in replays
                for strategy in args.strategies
                for budget in args.budgets
                for seed in range(args.repeats)
            ]
            dir_started = time.perf_counter()
            runs = []
            with contextlib.ExitStack() as stack:
                if args.jobs > 1:
                    pool = stack.enter_context(ProcessPoolExecutor(args.jobs))
                    done = pool.map(kt_run, *zip(*tasks), chunksize=args.repeats)
                else:
                    done = (kt_run(*task) for task in tasks)
                for r in done:  # progress on stderr, the tables on stdout
                    runs.append(r)
                    print(
                        f"[{len(runs)}/{len(tasks)} {time.perf_counter() - started:.0f} s] {r.cache} {r.strategy}"
                        f" {r.budget} seed {r.seed}: {r.seconds:.1f} s, {r.distinct} distinct, {r.results} results"
                        + (", timed out" if r.timed_out else "")
                        + (f", {r.error}" if r.error else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            for r in runs:
                if r.error is None:
                    r.score = replays[r.cache].score(np.inf if r.best_ms is None else r.best_ms)
            summary(cache_dir, list(replays), runs, args)
            print(f"({len(runs)} runs in {time.perf_counter() - dir_started:.0f} s)\n")
            everything += [{"cache_dir": cache_dir, **asdict(r)} for r in runs]
        os.chdir(home)
    if json_path:
        with open(json_path, "w") as f:
            meta = {"command": sys.argv, "kernel_tuner": version, "run_timeout_s": args.run_timeout_s}
            json.dump({**meta, "runs": everything}, f, indent=1)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
