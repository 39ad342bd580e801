"""Tune the default strategy's own options by replay, then check them on caches it never saw.

    PYTHONPATH=. python benchmarks/tune_portfolio.py TUNING_DIR CHECK_DIR [--seeds 20] [--check-seeds 20]
        [--budgets 50 100 200] [--ranks 8] [--rounds 2] [--random 0] [--margin 2] [--jobs 2] [--options NAME ...]
        [--json OUT.json]

The default strategy, ``portfolio``, has options (docs/strategies.md, "Options"): its members'
shares, the surrogate's noise, kernel and exploration, the first batch's design. Their defaults
were set by hand, a few replays each. This script chooses them by a coordinate search on the
caches of TUNING_DIR alone:

- Each option in turn tries every value of its row of ``GRID`` (the current value among them).
  A trial replays every tuning cache on ``--ranks`` simulated ranks with two batches in flight,
  as benchmarks/strategies.py does, seeds 0 .. S-1. Every trial uses the same seeds, so two
  trials differ by their options more than by luck.
- The objective is the mean score over caches, seeds and budgets (each budget weighs alike).
- The best value of a row replaces the current one only where its gain, paired by cache and
  seed, is more than ``--margin`` standard errors. ``--rounds`` passes over the options.
- A coordinate search misses options that help only together. ``--random N`` then tries N
  combinations near the options chosen so far (each option keeps its value, or with even odds
  takes a value drawn from its row), kept by the same rule.

A choice among many trials looks better on the seeds it was chosen on than it is. So the
script then replays the defaults and the chosen options on fresh seeds (S .. S+C-1) of the
tuning caches, and on the caches of CHECK_DIR, which the search never saw. It prints the three
tables and says, per budget, whether the chosen options gain on both fresh tables. A gain on one
and a loss on the other is overfitting, and it says so.

Run it from the repository root with ``PYTHONPATH=.``. It takes about a minute of one core per
trial with 20 seeds on the five shared caches; ``--jobs`` runs trials' replays in parallel.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from strategies import Replay, cache_name, cache_paths, replay  # benchmarks/strategies.py: the replay

from mpitune.strategies import portfolio

Value = int | float
# The values tried per option. Each row holds the option's default: the search starts there.
GRID: dict[str, tuple[Value, ...]] = {
    "exploration": (0.0, 0.003, 0.01, 0.03, 0.1, 0.3),
    "local_share": (0.0, 0.125, 0.25, 0.5, 0.75),
    "breed_after": (30, 60, 100, 150, 10**9),
    "breed_share": (0.125, 0.25, 0.375, 0.5),
    "model_share": (0.5, 0.75, 1.0),
    "switch": (150, 1000),
    "population": (10, 20, 40),
    "candidates": (300, 1000, 3000),
    "max_observations": (100, 250),
    "noise": (1e-3, 3e-3, 1e-2, 3e-2, 0.1),
    "smoothness": (0.5, 1.5, 2.5),
    "design": (8, 16, 24),
}
DEFAULTS: dict[str, Value] = {o.name: o.default for o in portfolio.OPTIONS}
_LOADED: dict[str, Replay] = {}  # per worker process: each cache is loaded once


@dataclass(frozen=True)
class Trial:
    """One setting's scores: ``scores[cache, seed, budget]``."""

    options: dict[str, Value]
    scores: np.ndarray

    @property
    def objective(self) -> float:
        return float(self.scores.mean())

    def gain_over(self, other: Trial, budget: int | None = None) -> tuple[float, float]:
        """The mean gain over ``other`` and its standard error, paired by cache and seed: over
        every budget, or at the budget of index ``budget``."""
        gaps = self.scores - other.scores
        paired = (gaps.mean(axis=2) if budget is None else gaps[:, :, budget]).ravel()
        return float(paired.mean()), float(paired.std(ddof=1) / np.sqrt(len(paired))) if len(paired) > 1 else 0.0


def _one(task: tuple[str, int, tuple[int, ...], int, tuple[tuple[str, Value], ...]]) -> list[float]:
    """The scores at each budget of one replay: a worker's unit of work."""
    path, seed, budgets, ranks, changed = task
    if path not in _LOADED:
        _LOADED[path] = Replay.load(path)
    search = replay(_LOADED[path], "portfolio", seed, list(budgets), ranks, options=dict(changed))
    return [search.scores[b] for b in budgets]


class Bench:
    """Replays settings on a set of caches, in a pool of worker processes."""

    def __init__(self, pool: multiprocessing.pool.Pool, budgets: Sequence[int], ranks: int):
        self.pool, self.budgets, self.ranks = pool, tuple(budgets), ranks

    def trials(
        self, settings: Sequence[Mapping[str, Value]], paths: Sequence[str], seeds: Sequence[int]
    ) -> list[Trial]:
        """Each setting on every cache and seed; the replays of all settings run side by side."""
        tasks = [
            (path, seed, self.budgets, self.ranks, tuple(sorted(changed(s).items())))
            for s in settings
            for path in paths
            for seed in seeds
        ]
        flat = np.array(self.pool.map(_one, tasks, chunksize=1))
        shaped = flat.reshape(len(settings), len(paths), len(seeds), len(self.budgets))
        return [Trial(dict(s), shaped[k]) for k, s in enumerate(settings)]


def changed(options: Mapping[str, Value]) -> dict[str, Value]:
    """The options that differ from the defaults: what a spec would set."""
    return {k: v for k, v in options.items() if DEFAULTS[k] != v}


def search(bench: Bench, paths: Sequence[str], args: argparse.Namespace) -> tuple[Trial, list[dict[str, object]]]:
    """The coordinate search, then ``--random`` combinations: the chosen options and a log of
    every trial."""
    names = list(args.options or GRID)
    seeds = range(args.seeds)
    (current,) = bench.trials([{**DEFAULTS, **args.start}], paths, seeds)
    log: list[dict[str, object]] = [{"options": changed(current.options), "objective": current.objective, "kept": True}]
    print(f"start {changed(current.options) or 'the defaults'}: objective {current.objective:.4f}\n")
    print("| round | options changed | objective | gain | standard error | kept |\n|---|---|---|---|---|---|")

    def step(label: str, trials: list[Trial]) -> Trial:
        """The best of ``trials`` where it beats the current options clearly, else those."""
        best = max(trials, key=lambda t: t.objective)
        gain, se = best.gain_over(current)
        chosen = best if gain > args.margin * se else current
        for trial in trials:
            gain, se = trial.gain_over(current)
            log.append({"options": changed(trial.options), "objective": trial.objective, "kept": trial is chosen})
            shown = ", ".join(f"{k}={v}" for k, v in changed(trial.options).items()) or "the defaults"
            mark = "yes" if trial is chosen else ""
            print(f"| {label} | {shown} | {trial.objective:.4f} | {gain:+.4f} | {se:.4f} | {mark} |", flush=True)
        return chosen

    for number in range(1, args.rounds + 1):
        moved = False
        for name in names:
            values = [v for v in GRID[name] if v != current.options[name]]
            kept = step(str(number), bench.trials([{**current.options, name: v} for v in values], paths, seeds))
            moved, current = moved or kept is not current, kept
        if not moved:
            break
    if args.random:
        rng = np.random.default_rng(0)
        draws = [dict(current.options) for _ in range(args.random)]
        for draw in draws:  # each option keeps its value, or with even odds takes any of its row
            draw.update({n: GRID[n][rng.integers(len(GRID[n]))] for n in names if rng.random() < 0.5})
        current = step("random", bench.trials(draws, paths, seeds))
    return current, log


def comparison(
    title: str, default: Trial, chosen: Trial, names: Sequence[str], budgets: Sequence[int]
) -> list[tuple[float, float]]:
    """A table of the defaults against the chosen options, per cache and budget; per budget the
    mean gain and its standard error."""
    head = " | ".join(f"{b}: defaults | chosen" for b in budgets)
    print(f"\n### {title}\n\n| cache | {head} |\n|---" + "|---|---" * len(budgets) + "|")
    for c, name in enumerate(names):
        cells = " | ".join(
            f"{default.scores[c, :, k].mean():.3f} | {chosen.scores[c, :, k].mean():.3f}" for k in range(len(budgets))
        )
        print(f"| {name} | {cells} |")
    means = " | ".join(
        f"**{default.scores[:, :, k].mean():.3f}** | **{chosen.scores[:, :, k].mean():.3f}**"
        for k in range(len(budgets))
    )
    print(f"| **mean** | {means} |")
    return [chosen.gain_over(default, k) for k in range(len(budgets))]


def start(item: str) -> tuple[str, Value]:
    """``NAME=VALUE`` of ``--start``, typed as the option is; exits with one line otherwise."""
    name, _, text = item.partition("=")
    option = {o.name: o for o in portfolio.OPTIONS}.get(name)
    if option is None:
        sys.exit(f"--start: portfolio has no option {name!r}")
    try:
        return name, option.check(option.kind(float(text)) if option.kind is float else int(text))
    except ValueError as error:
        sys.exit(f"--start: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tuning_dir", help="the caches the options are chosen on")
    parser.add_argument("check_dir", help="caches to check the choice on, never used to choose")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per trial while choosing")
    parser.add_argument("--check-seeds", type=int, default=20, help="fresh seeds per cache for the checks")
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="passes over the options")
    parser.add_argument("--random", type=int, default=0, help="random combinations near the options chosen")
    parser.add_argument("--margin", type=float, default=2.0, help="standard errors a gain must exceed to be kept")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--options", nargs="+", help="the options to tune (default: every row of GRID)")
    parser.add_argument(
        "--start", nargs="+", default=[], metavar="NAME=VALUE", help="start the search here (default: the defaults)"
    )
    parser.add_argument("--json", help="write every trial and the checks here")
    args = parser.parse_args()
    unknown = sorted(set(args.options or ()) - set(GRID))
    if unknown:
        sys.exit(f"no grid for {', '.join(unknown)}; tunable: {', '.join(GRID)}")
    args.start = dict(start(item) for item in args.start)
    tuning, check = cache_paths(args.tuning_dir), cache_paths(args.check_dir)
    print(
        f"# Tuning portfolio's options on {args.tuning_dir} ({len(tuning)} caches, seeds 0..{args.seeds - 1}), "
        f"{args.ranks} simulated ranks, budgets {' '.join(map(str, args.budgets))}\n"
    )
    with multiprocessing.Pool(args.jobs) as pool:
        bench = Bench(pool, args.budgets, args.ranks)
        chosen, log = search(bench, tuning, args)
        print(f"\nchosen: {changed(chosen.options) or 'the defaults'}")
        fresh = range(args.seeds, args.seeds + args.check_seeds)
        tables = {
            f"{args.tuning_dir}, seeds 0..{args.seeds - 1} (chosen on these)": (tuning, range(args.seeds)),
            f"{args.tuning_dir}, fresh seeds {fresh.start}..{fresh.stop - 1}": (tuning, fresh),
            f"{args.check_dir}, seeds 0..{args.check_seeds - 1} (never used to choose)": (
                check,
                range(args.check_seeds),
            ),
        }
        gains: dict[str, list[tuple[float, float]]] = {}
        for title, (paths, seeds) in tables.items():
            settings = [DEFAULTS, chosen.options] if changed(chosen.options) else [DEFAULTS]
            default, mine = (bench.trials(settings, paths, seeds) * 2)[:2]
            names = [cache_name(p) for p in paths]
            gains[title] = comparison(title, default, mine, names, args.budgets)
    checks = list(gains.values())[1:]
    print("\n### Verdict (chosen minus defaults, on the two tables the choice was not made on)\n")
    for k, budget in enumerate(args.budgets):
        signs = [0 if abs(gain) <= args.margin * se else int(np.sign(gain)) for gain, se in (c[k] for c in checks)]
        if not changed(chosen.options):
            verdict = "the search kept the defaults"
        elif signs == [1, 1]:
            verdict = "a gain on both"
        elif sorted(signs) == [-1, 1]:
            verdict = "overfitting: a gain on one, a loss on the other, so no gain"
        elif -1 in signs:
            verdict = "a loss"
        elif 1 in signs:
            verdict = "a gain on one, within the noise on the other"
        else:
            verdict = f"within the noise on both (no gain or loss beyond {args.margin:g} standard errors)"
        cells = ", ".join(
            f"{where} {g:+.3f} ± {se:.3f}"
            for where, (g, se) in zip(("fresh seeds", "check caches"), (c[k] for c in checks))
        )
        print(f"- {budget}: {cells}: {verdict}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"chosen": changed(chosen.options), "trials": log, "gains": gains}, fh, indent=1)


if __name__ == "__main__":
    main()
