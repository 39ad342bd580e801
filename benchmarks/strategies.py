"""How well each strategy tunes the real measured caches, replayed in-process.

    python benchmarks/strategies.py CACHE_DIR [CACHE_DIR ...] [--ranks 8] [--budgets 20 50 100 200 400]
        [--repeats 10] [--depth 2] [--strategies NAME ...]
    python benchmarks/strategies.py SHARED_DATA --prior [--reversed] [--budgets 20 50 100 200] [--repeats 10]
        [--pairs NAME ...]

Replays every Kernel Tuner cache (``*.json``, ``*.json.gz``) and mpitune file (``*.h5``) in
each CACHE_DIR (one set of tables per directory: the caches to develop on, then the validation
caches) without MPI, as the scheduler's ``batches`` policy runs a search (``--schedule batches``;
on several ranks the default is now ``refill``, which benchmarks/refill.py measures with the
scheduler itself): each batch asks the strategy for ``min(ranks, budget left)`` ids, deals them
to the simulated ranks, answers them from the measurements and tells the results; with
``--depth 2`` (the default, what that policy does on more than one rank) batch b is asked once
batch b - 2 is told, so the previous batch is still in flight, and with ``--depth 1`` once
batch b - 1 is. The simulated
wall time follows the same pipeline (``pipeline_wall_s``) with each configuration's compile +
verify + benchmark seconds, so it is what the run would have taken on that many GPUs; "1 rank"
is the sum over all configurations.

Score = (median valid time - best found) / (median valid time - optimum), averaged over the
repeats (seeds 0..K-1): 0 is a typical random configuration, 1 the optimum. One search per
seed to the largest budget gives the scores of all budgets (see ``replay``). Prints one
Markdown table per cache and a summary over each directory's caches, with the ratio of
simulated wall time on ``ranks`` ranks to one rank (over all caches, and in the worst one),
and that ratio for the default strategy with a budget (``spec.settings.default_strategy``).

With ``--over-time [KT_STRATEGY ...]`` it prints instead the benchmark hub's score over time
(relative to random search, averaged over a time range) of the default strategy on 1 and
``--ranks`` ranks, on the scheduler's simulated clock, beside the Kernel Tuner 1.5.0 strategies
named, on one device in its own simulation mode: benchmarks/time_score.py does it, and says how.

With ``--prior`` it replays instead the pairs of caches of ``priors.PAIRS`` under SHARED_DATA
(the folder holding ``caches`` and ``validation``), each target once with the other cache of its
pair as its prior (``priors.load_prior``: ``measured.load`` and ``model.prior.align``, as a run
given ``--prior`` builds it) and once without, and prints both tables and the difference (the
default strategy unless ``--strategies`` names others). ``--reversed`` reverses each prior's order
first: a prior that misleads, pointing at the worst configurations. ``--pairs NAME ...`` keeps
only the pairs whose target or prior is named (a cache's file name without its suffixes, e.g.
``convolution_A100``); by default all.

Run it from the repository root with ``PYTHONPATH=.``: the script's own directory comes first
on ``sys.path``, so without it ``import mpitune`` finds whatever copy is installed.
"""

from __future__ import annotations

import argparse
import copy
import glob
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from priors import cache_path, directed, load_prior, reversed_prior  # benchmarks/priors.py: the shared pairs

from mpitune import strategies
from mpitune.model.objective import Objective
from mpitune.model.prior import Prior
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.batching import deal, deal_by_cost
from mpitune.scheduling.costs import CostModel
from mpitune.spec.settings import default_strategy
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
        return cls(
            cache_name(path),
            space,
            [m.status for m in records],
            time_ms,
            cost_s,
            float(np.nanmedian(time_ms)),
            float(np.nanmin(time_ms)),
        )

    def result(self, config_id: int) -> Result:
        """The measurement of one configuration, scored as rank 0 scores it."""
        return TIME.evaluate(Result(config_id, self.status[config_id], time_ms=float(self.time_ms[config_id])), {})

    def score(self, best_ms: float) -> float:
        return (self.median - best_ms) / (self.median - self.optimum) if np.isfinite(best_ms) else 0.0


@dataclass
class Search:
    """One search to the largest budget: the score at every budget, and its costs."""

    scores: dict[int, float]
    wall_s: float  # simulated, on ``ranks`` ranks, at the largest budget
    serial_s: float  # the same evaluations on one rank
    ask_s: float  # seconds spent asking, per configuration asked


def busy_s(
    ranks: int, now_s: float, reported_s: Sequence[float] | None, handed_s: float, ahead_s: np.ndarray | None
) -> np.ndarray:
    """Predicted seconds from ``now_s`` until each rank can start a batch handed out now: the
    oldest batch in flight, handed out at ``handed_s``, holds ``ahead_s`` predicted seconds of
    each rank's work (None: nothing is in flight). A worker started that chunk when it had
    reported its previous one (``reported_s``, per rank; None: no batch recorded yet) or when the
    chunk went out, whichever came later; rank 0, which records each batch before its own next
    chunk, is free only once the slowest rank is. Only the oldest batch counts. (The rule the
    scheduler's batches were dealt by before rank 0 measured in a lane; the scheduler now asks
    what each rank still holds, scheduling/handouts.py's ``Handouts._busy_s``.)"""
    if ahead_s is None:
        return np.zeros(ranks)
    started_s = np.full(ranks, handed_s) if reported_s is None else np.maximum(np.asarray(reported_s), handed_s)
    free_s = np.minimum(started_s, now_s) + ahead_s
    free_s[0] = max(now_s + ahead_s[0], float(free_s.max()))
    busy: np.ndarray = np.maximum(free_s - now_s, 0.0)
    return busy


def pipeline_wall_s(cache: Replay, batches: list[list[int]], ranks: int, depth: int, rank0_after: bool = True) -> float:
    """Simulated wall time of a run that keeps ``depth`` batches in flight, as the scheduler's
    ``batches`` policy does on more than one rank (depth 2): batch b is handed out when batch
    b - depth is gathered, so a rank that finishes its chunk early starts its next one at once
    instead of waiting for the slowest rank (depth 1: rounds that each wait for it). With
    ``rank0_after`` (the default, this benchmark's model since its first figures) rank 0 records
    each batch after its own chunk of it and before its chunk of the next, so it waits for the
    slowest every batch, as the scheduler did before rank 0 measured in a lane; False: rank 0
    measures beside its hand-outs, as a worker does, which is what the scheduler does now on
    several ranks (scheduling/rounds.py; benchmarks/pipelining.py compares the two).
    Each batch (the ids asked, in order) is dealt blind (``batching.deal``) until a cost is
    known, then by the costs predicted from the batches recorded so far (``CostModel``) and by
    when each rank will be free of the oldest batch in flight (``busy_s``).
    A configuration costs its compile + verify + benchmark seconds."""
    model = CostModel(cache.space)
    finish = np.zeros(ranks)  # when each rank is done with what it was handed so far
    gathered: list[float] = []
    reported: list[np.ndarray] = []  # per batch, when each rank was done with its chunk
    chunks: list[list[list[int]]] = []
    for b, ids in enumerate(batches):
        handed_s = gathered[b - depth] if b >= depth else 0.0
        if b >= depth:  # recorded and told: its costs are known
            model.learn(Result(i, cache.status[i], compile_s=float(cache.cost_s[i])) for i in batches[b - depth])
        predicted_s = model.predict_s(ids)
        if predicted_s is None:
            dealt = deal(ids, ranks, b)
        else:
            oldest = b - depth + 1  # the oldest batch in flight, handed out when batch oldest - depth was gathered
            ahead_s = model.chunks_s(chunks[oldest]) if oldest < b else None
            oldest_s = gathered[oldest - depth] if oldest >= depth else 0.0
            last = reported[b - depth] if b >= depth else None
            dealt = deal_by_cost(ids, predicted_s, ranks, busy_s(ranks, handed_s, last, oldest_s, ahead_s))
        chunks.append(dealt)
        chunk_s = np.array([cache.cost_s[chunk].sum() for chunk in dealt])
        start_s = np.maximum(finish, handed_s)
        if b and rank0_after:
            start_s[0] = max(start_s[0], gathered[b - 1])
        finish = start_s + chunk_s
        reported.append(finish.copy())
        gathered.append(float(finish.max()))
    return gathered[-1] if gathered else 0.0


def replay(
    cache: Replay,
    strategy_name: str,
    seed: int,
    budgets: list[int],
    ranks: int,
    depth: int = 2,
    prior: Prior | None = None,
    per_batch: int | None = None,
    rank0_after: bool = True,
    options: Mapping[str, object] | None = None,
) -> Search:
    """One search per seed serves every budget: a run with a smaller budget asks the same batches
    until its last one, which asks for fewer ids (the budget left); that last ask is made on a
    copy of the strategy, so each budget's score is exactly that of a run of its own. Batch b
    is asked once batch b - ``depth`` is told, as the scheduler's batches policy interleaves
    them (depth 2: the previous batch is still out when the next is asked); a budget's score is
    over every id handed out, told or not, since all of them are measured by the end.
    ``prior``: times measured elsewhere, given to the strategy before its first ask as a run's
    ``--prior`` does.
    ``per_batch`` (default: ``ranks``, one per rank) and ``rank0_after`` are other rules for the
    scheduler, for benchmarks/pipelining.py. ``options``: the strategy's options, as a spec's
    ``strategy_options`` gives them (benchmarks/tune_portfolio.py)."""
    per_batch = per_batch or ranks
    strategy = strategies.create(strategy_name, cache.space, seed, options or {}, prior=prior)
    batches: list[list[int]] = []
    told, handed, best, asking = 0, 0, np.inf, 0.0
    scores: dict[int, float] = {}
    largest = max(budgets)

    def best_of(ids: list[int]) -> float:
        return min([best] + [cache.time_ms[i] for i in ids if cache.status[i] == "ok"])

    while handed < largest:
        while told <= len(batches) - depth:
            strategy.tell([cache.result(i) for i in batches[told]])
            told += 1
        for budget in budgets:  # a smaller budget whose last, partial batch is this one
            if handed < budget < handed + per_batch and budget < largest:
                scores[budget] = cache.score(best_of(copy.deepcopy(strategy).ask(budget - handed)))
        t0 = time.perf_counter()
        ids = strategy.ask(min(per_batch, largest - handed))
        asking += time.perf_counter() - t0
        if not ids:
            break
        batches.append(ids)
        handed += len(ids)
        best = best_of(ids)
        if handed in budgets:
            scores[handed] = cache.score(best)
    for budget in budgets:  # an exhausted space: every larger budget ends with the best found
        scores.setdefault(budget, cache.score(best))
    wall = pipeline_wall_s(cache, batches, ranks, depth, rank0_after)
    return Search(scores, wall, float(sum(cache.cost_s[ids].sum() for ids in batches)), asking / max(handed, 1))


def cache_name(path: str) -> str:
    """A cache's name in the tables: its file name without its suffixes."""
    return os.path.basename(path).split(".")[0]


def cache_paths(cache_dir: str) -> list[str]:
    """The measured caches of a directory (Kernel Tuner caches and mpitune files), sorted; exits
    with a line naming the directory where there are none."""
    paths = sorted(
        p for pattern in ("*.json", "*.json.gz", "*.h5") for p in glob.glob(os.path.join(cache_dir, pattern))
    )
    if not paths:
        sys.exit(f"no caches in {cache_dir}")
    return paths


def table(cache_dir: str, args: argparse.Namespace) -> None:
    """The tables of one directory of caches: one per cache and the mean over them."""
    paths = cache_paths(cache_dir)
    print(f"## {cache_dir}\n")
    scores: dict[tuple[str, str, int], float] = {}
    ratios: dict[str, list[float]] = {name: [] for name in args.strategies}
    walls: dict[str, list[tuple[float, float]]] = {name: [] for name in args.strategies}
    for path in paths:
        cache = Replay.load(path)
        print(f"### {cache.name}: {len(cache.space)} configurations, {int(np.isnan(cache.time_ms).sum())} failed\n")
        print(
            "| strategy | "
            + " | ".join(f"{b}" for b in args.budgets)
            + f" | wall s @{args.budgets[-1]}, {args.ranks} ranks | 1 rank | ms per config asked |"
        )
        print("|---" * (len(args.budgets) + 4) + "|")
        for name in args.strategies:
            runs = [replay(cache, name, seed, args.budgets, args.ranks, args.depth) for seed in range(args.repeats)]
            cells = []
            for budget in args.budgets:
                scores[cache.name, name, budget] = float(np.mean([r.scores[budget] for r in runs]))
                cells.append(f"{scores[cache.name, name, budget]:.3f}")
            wall, serial = np.mean([r.wall_s for r in runs]), np.mean([r.serial_s for r in runs])
            ratios[name].append(wall / serial)
            walls[name].append((wall, serial))
            ask_ms = np.mean([r.ask_s for r in runs]) * 1e3
            print(f"| {name} | " + " | ".join(cells) + f" | {wall:.0f} | {serial:.0f} | {ask_ms:.2f} |")
        print()
    caches = sorted({c for c, _, _ in scores})
    print(f"### mean score over {len(caches)} caches in {cache_dir}\n")
    print(
        "| strategy | "
        + " | ".join(f"{b}" for b in args.budgets)
        + f" | mean | wall @{args.budgets[-1]}, {args.ranks} ranks / 1 rank (all caches) | (worst cache) |"
    )
    print("|---" * (len(args.budgets) + 4) + "|")
    for name in args.strategies:
        means = [np.mean([scores[c, name, b] for c in caches]) for b in args.budgets]
        overall = sum(w for w, _ in walls[name]) / sum(s for _, s in walls[name])
        print(
            f"| {name} | "
            + " | ".join(f"{m:.3f}" for m in means)
            + f" | {np.mean(means):.3f} | {overall:.3f} | {max(ratios[name]):.3f} |"
        )
    default = default_strategy(has_budget=True)
    if default in walls:
        overall = sum(w for w, _ in walls[default]) / sum(s for _, s in walls[default])
        print(
            f"\nThe default with a budget, {default}: {args.budgets[-1]} evaluations on {args.ranks} ranks take"
            f" {overall:.4f} (1/{1 / overall:.2f}) of the simulated time of the same evaluations on one rank"
            f" over all caches, {max(ratios[default]):.4f} (1/{1 / max(ratios[default]):.2f}) in the worst cache."
        )
    print()


def prior_tables(data_dir: str, args: argparse.Namespace) -> None:
    """Per strategy, the mean score of each pair's target with the other cache as its prior, the
    same without, and the difference; the mean over the pairs, and the worst difference."""
    for name in args.strategies:
        targets: dict[str, Replay] = {}
        rows: list[tuple[str, list[float], list[float]]] = []
        for source, target in directed():
            if args.pairs and not {os.path.basename(source), os.path.basename(target)} & set(args.pairs):
                continue
            if target not in targets:
                targets[target] = Replay.load(cache_path(data_dir, target))
            cache = targets[target]
            prior = load_prior(cache_path(data_dir, source), cache.space)
            if args.reversed:
                prior = reversed_prior(prior.time_ms[0])
            scores = []
            for given in (prior, None):
                runs = [
                    replay(cache, name, seed, args.budgets, args.ranks, args.depth, given)
                    for seed in range(args.repeats)
                ]
                scores.append([float(np.mean([r.scores[b] for r in runs])) for b in args.budgets])
            rows.append((f"{os.path.basename(source)} -> {os.path.basename(target)}", *scores))
        header = "| prior -> target | " + " | ".join(f"{b}" for b in args.budgets) + " |"
        rule = "|---" * (len(args.budgets) + 1) + "|"
        for title, column in (("with the prior", 1), ("without a prior", 2), ("with minus without", 0)):
            print(f"### {name}, {title}\n\n{header}\n{rule}")
            for row in rows:
                values = [w - o for w, o in zip(row[1], row[2])] if column == 0 else row[column]
                print(f"| {row[0]} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
            if column:
                means = np.mean([row[column] for row in rows], axis=0)
                print("| **mean** | " + " | ".join(f"**{m:.3f}**" for m in means) + " |")
            else:
                worst = np.min([[w - o for w, o in zip(row[1], row[2])] for row in rows], axis=0)
                print("| **worst** | " + " | ".join(f"**{m:+.3f}**" for m in worst) + " |")
            print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dirs", nargs="+", help="one set of tables per directory")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="+", default=[20, 50, 100, 200, 400])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--depth",
        type=int,
        default=2,
        help="batches in flight: 2 as the scheduler's batches policy keeps on several ranks, 1 for rounds that wait",
    )
    parser.add_argument("--strategies", nargs="+")
    parser.add_argument(
        "--prior",
        action="store_true",
        help="replay the shared pairs under the one folder given, with the other cache of a pair as prior and without",
    )
    parser.add_argument(
        "--reversed", action="store_true", help="with --prior: each prior's order reversed, a prior that misleads"
    )
    parser.add_argument(
        "--pairs", nargs="+", help="with --prior: only the pairs whose target or prior is one of these caches (by name)"
    )
    parser.add_argument(
        "--over-time",
        nargs="*",
        metavar="KT_STRATEGY",
        help="instead: the benchmark hub's score over time of the default on 1 and --ranks simulated ranks, "
        "beside these Kernel Tuner 1.5.0 strategies on one device (benchmarks/time_score.py)",
    )
    args = parser.parse_args()
    if args.over_time is not None:
        import time_score  # benchmarks/time_score.py: the scheduler's simulated clock, not this replay's

        ranks = [str(n) for n in sorted({1, args.ranks})]
        dirs = args.cache_dirs
        raise SystemExit(
            time_score.main(
                [*dirs, "--ranks", *ranks, "--repeats", str(args.repeats), "--kt-strategies", *args.over_time]
            )
        )
    if args.prior and len(args.cache_dirs) != 1:
        parser.error("--prior takes one folder: the shared data, holding caches/ and validation/")
    args.strategies = args.strategies or ([default_strategy(has_budget=True)] if args.prior else strategies.available())
    args.budgets = sorted(args.budgets)
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(f"ranks: {args.ranks}, depth: {args.depth}, repeats: {args.repeats} (seeds 0..{args.repeats - 1})\n")
    started = time.perf_counter()
    if args.prior:
        prior_tables(args.cache_dirs[0], args)
    for cache_dir in [] if args.prior else args.cache_dirs:
        table(cache_dir, args)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
