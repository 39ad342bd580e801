"""Whether confirmation names the true best on biased devices: brute force replayed on measured data.

    python benchmarks/confirmation.py [CACHE_DIR] [--caches NAME ...] [--ranks 8]
        [--biases 1 2 5] [--seeds 20] [--truth median] [--jobs 1]

Each Kernel Tuner cache (``*.json``, ``*.json.gz``) in CACHE_DIR (default: the shared caches
beside the repository, ../shared/data/caches) is searched by brute force on ``--ranks``
simulated ranks in this process, as benchmarks/replay_rounds.py's ``simulated_efficiency``
runs it: the real rounds over ``InProcessRanks`` by the default schedule (refill on several
ranks), rank 0 measuring in its lane, and rank 0's Manager, which hands out the confirmation
once the search's hand-outs are recorded. Every rank has its own replay backend, and so its own
device: for bias b (in %) and each seed, each rank's factor is drawn uniformly from
[1 - b, 1 + b] (the seed's own stream), so a configuration's search time is its recorded time
times the factor of the rank that measured it. The seed is also the run's seed: the launches the
confirmation draws again (from the recorded ones, scaled by the rank's factor) and the
bootstrap's resamples vary with it.

The truth is the cache itself: the true best is the configuration (status ok) with the lowest
median of its recorded launches, and a configuration's true time is that median (``--truth
time``: the cache's "time" instead, which Kernel Tuner records as the launches' mean; see
``Truth``). Per run the benchmark reads the HDF5 file's latest confirmation back
(offline/confirmation.py) and the search's own best (the lowest time_ms recorded: what mpitune
would pick without confirmation). Printed per cache and bias, then per bias over every cache:

- hit: the share of runs whose confirmed winner is the true best or names it among the tied
  (goal: at least 99 %), and for the search's best whether it is the true best;
- the winner's true time over the true best's, minus 1: mean and worst (goal: within 1 %);
- the confirmation's cost: its simulated seconds against the run's simulated wall time
  (confirmation included), mean and max, and the mean numbers of candidates and of tied ones.

Times are simulated from the recorded compile, verify and benchmark durations; the real time the
benchmark takes is printed last (``--jobs N``: N processes, one (cache, bias) each at a time).
Run it from the repository root with ``PYTHONPATH=.``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import glob
import io
import logging
import os
import platform
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mpitune.backends.replay import ReplayBackend, bias_factor
from mpitune.model.problem import Problem, plain
from mpitune.model.result import Status
from mpitune.model.timeline import Clock, Timeline
from mpitune.offline.confirmation import latest
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.prepare import prepare
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.transport import InProcessRanks
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured
from mpitune.store.cache import Cache, RunInfo
from mpitune.store.reader import read

SHARED_CACHES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "caches"
SEEDS = 20
_BIAS_DRAWS = 29  # the stream of the factors' draws (any fixed number): not the replay's own


@dataclass(frozen=True)
class Outcome:
    """One run's figures: hits, the winner's true time over the best's, what confirming cost."""

    confirmed_hit: bool  # the winner is the true best, or names it among the tied
    search_hit: bool  # the search's own best (lowest time_ms recorded) is the true best
    winner_excess: float  # true time of the confirmed winner / the true best's - 1
    search_excess: float  # the same for the search's own best
    cost_share: float  # the confirmation's simulated seconds / the run's simulated wall
    candidates: int
    tied: int


@dataclass(frozen=True)
class Truth:
    """A cache's true times of its ok configurations, by parameter values: by default the
    median of each one's recorded launches, which is what the replayed confirmation draws
    from (and what mpitune's time_ms means); ``time``: the cache's own "time", which Kernel
    Tuner records as the mean of the launches, and which the replayed search reports."""

    names: tuple[str, ...]
    time_ms: dict[tuple, float]

    @classmethod
    def of(cls, data: measured.MeasuredData, by: str = "median") -> Truth:
        def true_ms(m: measured.Measurement) -> float:
            return float(np.median(m.times_ms)) if by == "median" and m.times_ms else m.time_ms

        ok = {k: true_ms(m) for k, m in data.lookup().items() if m.status == Status.OK and np.isfinite(m.time_ms)}
        return cls(tuple(data.tune_params), ok)

    @property
    def best_ms(self) -> float:
        return min(self.time_ms.values())

    def of_config(self, config: dict) -> float:
        return self.time_ms[tuple(config[n] for n in self.names)]


def factors_for(ranks: int, bias: float, seed: int) -> tuple[float, ...]:
    """Each rank's device factor, uniform in [1 - bias, 1 + bias], from the seed alone."""
    rng = np.random.default_rng([seed, _BIAS_DRAWS])
    return tuple(float(f) for f in rng.uniform(1.0 - bias, 1.0 + bias, size=ranks))


def rank_backends(template: ReplayBackend, problem: Problem, ranks: int) -> list[ReplayBackend]:
    """``ReplayBackend(problem, rank)`` for every rank without reading the measured data again
    (gemm's takes seconds): copies of ``template``, a replay backend of the same cache, with
    the run's seed, and each rank's own rank and factor (``bias_factor``)."""
    out = []
    for rank in range(ranks):
        backend = copy.copy(template)
        backend.rank, backend.seed, backend.factor = (
            rank,
            problem.kernel.replay.seed,
            bias_factor(problem.kernel.replay, rank),
        )
        out.append(backend)
    return out


def confirmed_run(
    data: measured.MeasuredData, template: ReplayBackend, out: str, ranks: int, factors: tuple[float, ...], seed: int
) -> Manager:
    """A brute-force replay of ``data`` on ``ranks`` biased ranks, confirmation included, into
    ``out``; ``template``: a replay backend of ``data`` (``rank_backends``)."""
    problem, settings = replay_problem(
        data, Overrides(cache_path=out, strategy="brute_force", seed=seed), device_bias=factors
    )
    setup = prepare(problem, settings)
    cache = Cache(
        settings.cache_path, problem.identity(["replayed"]), problem.kernel.tune_params, problem.kernel.iterations
    )
    hosts, devices = ("host",) * ranks, ("replayed",) * ranks
    manager = Manager(setup, cache, hosts, devices, Clock(simulated=True))
    cache.start_run(
        RunInfo(0.0, ranks, "brute_force", seed, None, None, manager.batch_size, len(setup.space), "", ""),
        hosts,
        devices,
        (0,) * ranks,
    )
    backends = rank_backends(template, problem, ranks)
    timelines = [Timeline(manager.clock)] + [Timeline(Clock(simulated=True)) for _ in range(ranks - 1)]
    world = InProcessRanks(backends, timelines)
    with contextlib.redirect_stdout(io.StringIO()):  # the progress lines
        measuring = measuring_timeline(timelines[0]) if ranks > 1 else None  # rank 0's lane, as a run's
        stop = rounds(world, manager, backends[0], timelines[0], None, Watch(), lambda: None, measuring)
    cache.finish_run(manager.clock.now(), stop.value, manager.measured)
    cache.close()
    return manager


def outcome(out: str, truth: Truth) -> Outcome:
    """What the file ``out`` says, against the truth."""
    data = read(out)
    confirmation, cost, _ = latest(data)
    if confirmation is None or cost is None or cost.share_of_run is None:
        raise SystemExit(f"{out}: the run has no confirmation with a verdict")
    best_ms = truth.best_ms
    winner_ms = truth.of_config(confirmation.winner)
    named = [winner_ms] + [truth.of_config(c) for c in confirmation.tied]
    ok = data.results[data.results["status"] == Status.OK.value]
    row = ok[np.argmin(ok["time_ms"])]
    search_ms = truth.of_config({n: plain(row[n]) for n in truth.names})
    return Outcome(
        confirmed_hit=min(named) == best_ms,
        search_hit=search_ms == best_ms,
        winner_excess=winner_ms / best_ms - 1,
        search_excess=search_ms / best_ms - 1,
        cost_share=cost.share_of_run,
        candidates=cost.candidates,
        tied=len(confirmation.tied),
    )


def row(label: str, bias_pct: float, found: list[Outcome]) -> str:
    """One table row of ``found``'s figures."""

    def pct(values) -> float:
        return 100 * float(np.mean(values))

    excess = [o.winner_excess for o in found]
    search = [o.search_excess for o in found]
    cost = [o.cost_share for o in found]
    return (
        f"| {label} | {bias_pct:g} % | {len(found)} | {pct([o.confirmed_hit for o in found]):.0f} % | "
        f"{pct([o.search_hit for o in found]):.0f} % | {pct(excess):.2f} / {100 * max(excess):.2f} % | "
        f"{pct(search):.2f} / {100 * max(search):.2f} % | {pct(cost):.2f} / {100 * max(cost):.2f} % | "
        f"{np.mean([o.candidates for o in found]):.1f} | {np.mean([o.tied for o in found]):.1f} |"
    )


HEADER = (
    "| cache | bias | runs | confirmed hit | search hit | winner over best mean / worst | "
    "search best over best mean / worst | confirm cost of run mean / max | candidates | tied |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def machine() -> str:
    """The CPU model and core count, as /proc/cpuinfo names them where it exists."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def cache_runs(source: str, bias_pct: float, seeds: int, ranks: int, truth_by: str) -> list[Outcome]:
    """The runs of one cache at one bias, seeds 0..seeds-1 (one task of ``--jobs``)."""
    # Rank 0 warns of each device that stands out: here they all do, by design.
    logging.getLogger("mpitune.scheduling.confirming").setLevel(logging.ERROR)
    data = measured.load(source)
    truth = Truth.of(data, truth_by)
    found = []
    with tempfile.TemporaryDirectory(prefix="mpitune-confirmation-") as tmp:
        template = ReplayBackend(replay_problem(data, Overrides(cache_path=os.path.join(tmp, "x.h5")))[0].kernel)
        for seed in range(seeds):
            out = os.path.join(tmp, f"{seed}.h5")
            confirmed_run(data, template, out, ranks, factors_for(ranks, bias_pct / 100, seed), seed)
            found.append(outcome(out, truth))
            os.remove(out)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches", nargs="?", default=str(SHARED_CACHES))
    parser.add_argument("--caches", dest="names", nargs="+", help="only these caches (file names without .json*)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--biases", type=float, nargs="+", default=[1.0, 2.0, 5.0], help="in %%")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="runs per cache and bias (seeds 0..N-1)")
    parser.add_argument("--truth", choices=["median", "time"], default="median", help="see Truth")
    parser.add_argument("--jobs", type=int, default=1, help="processes, one (cache, bias) each at a time")
    args = parser.parse_args(argv)
    sources = sorted(glob.glob(os.path.join(args.caches, "*.json*")))
    if args.names:
        sources = [s for s in sources if os.path.basename(s).split(".")[0] in args.names]
    if not sources:
        raise SystemExit(f"no Kernel Tuner cache in {args.caches}" + (f" named {args.names}" if args.names else ""))
    started = time.perf_counter()
    command = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    print("command: python " + " ".join(shlex.quote(a) for a in command))
    print(f"machine: {machine()}")
    print(HEADER)
    tasks = [(s, b) for s in sources for b in args.biases]
    by_bias: dict[float, list[Outcome]] = {b: [] for b in args.biases}
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(ProcessPoolExecutor(args.jobs))
            results = pool.map(cache_runs, *zip(*[(s, b, args.seeds, args.ranks, args.truth) for s, b in tasks]))
        else:
            results = (cache_runs(s, b, args.seeds, args.ranks, args.truth) for s, b in tasks)
        for (source, bias_pct), found in zip(tasks, results):
            by_bias[bias_pct] += found
            print(row(os.path.basename(source).split(".")[0], bias_pct, found), flush=True)
    for bias_pct, found in by_bias.items():
        print(row("all", bias_pct, found))
    took_s = time.perf_counter() - started
    print(f"{args.ranks} ranks, brute force, truth: {args.truth}; took {took_s:.0f} s with {args.jobs} job(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
