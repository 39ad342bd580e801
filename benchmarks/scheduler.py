"""What scheduling costs: rank 0's time per configuration, parallel efficiency on many ranks,
and rank 0's memory for a space of 10 million configurations.

    python benchmarks/scheduler.py [--caches DIR] [--quick] [--only cost|efficiency|memory]

1. Rank 0's cost per configuration, on a synthetic measured space (a Kernel Tuner cache of
   200,000 configurations the script writes into a temporary directory) and on the largest
   cache in DIR. First in one process with the real pieces of rank 0's loop (``Manager`` with
   its strategy, a real HDF5 cache and the replay backend standing in for the ranks), timing
   each piece with ``perf_counter``; then as the real wall time of ``mpiexec -n 2 python -m
   mpitune replay``: the difference between a long and a short run, per extra configuration,
   is everything the loop costs per configuration (scatter and gather included), while the
   replayed measuring itself costs microseconds.
2. Parallel efficiency of a brute-force replay of the largest cache in DIR: sum over ranks of
   compile + verify + benchmark time / (ranks x simulated wall). First simulated in one process
   on 8, 64 and 256 ranks with the real Manager (dealing by predicted cost, and interleaved) and
   the replay backend's recorded durations; then replayed under ``mpiexec`` on 64 ranks (on a
   2-core machine: the clock is simulated, so oversubscription changes the real time only),
   read from the run's HDF5 file as ``mpitune report`` does; and for every batch size from the
   recorded durations directly (the same rounds, dealt by ``batching.deal``), next to what ranks
   that pull configurations one at a time within a batch would reach, and what rounds whose next
   chunk is already on its rank when it finishes (double buffering) would reach.
3. Peak memory (``ru_maxrss``) of a process that builds a 10-million-configuration space and
   asks and tells batches of a strategy, as rank 0 does.

``--quick`` runs every part small (seconds), so that a test can keep the script working.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from replay_rounds import double_buffered_s, durations, list_schedule_s, replay_manager, simulated_efficiency  # noqa: E402

from mpitune import backends, strategies  # noqa: E402
from mpitune.api.launch import mpiexec  # noqa: E402
from mpitune.model.objective import Objective  # noqa: E402
from mpitune.model.restrictions import Restriction  # noqa: E402
from mpitune.model.result import Result  # noqa: E402
from mpitune.model.searchspace import SearchSpace  # noqa: E402
from mpitune.model.timeline import Timeline  # noqa: E402
from mpitune.offline.report import summarize  # noqa: E402
from mpitune.scheduling.batching import deal  # noqa: E402
from mpitune.scheduling.rank import serve  # noqa: E402
from mpitune.scheduling.session import progress_line  # noqa: E402
from mpitune.store import measured  # noqa: E402
from mpitune.store.reader import read  # noqa: E402

TIME = Objective()  # the median time, lower is better: what results are scored by here

PYTHON = sys.executable


@dataclass
class Scale:
    """How big each part is: the full benchmark, or ``--quick``."""

    synthetic_sizes: tuple[int, ...]  # values per parameter of the synthetic space
    loop_configs: int  # configurations through rank 0's loop in one process
    mpi_configs: tuple[int, int]  # budgets of the short and the long real replay
    ranks: int  # ranks of the efficiency replayed under mpiexec
    per_rank_mpi: tuple[int | None, ...]  # configurations per rank per batch replayed (None: default)
    per_rank_model: tuple[int, ...]  # ... and computed from the recorded durations
    memory_sizes: tuple[int, ...]  # the large space for the memory part
    memory_batches: int
    simulated_ranks: tuple[int, ...]  # ranks of the efficiency simulated in one process
    batch_sizes: tuple[int, ...] = (8, 64, 512)  # configurations per batch for rank 0's cost


FULL = Scale(
    (10, 10, 10, 10, 4, 5),
    10000,
    (500, 10500),
    64,
    (None,),
    (1, 2, 4, 8, 16, 32),
    (10,) * 7,
    3,
    (8, 64, 256),
    (8, 64, 512, 2048),
)
QUICK = Scale((4, 4, 4, 4, 2, 2), 1000, (64, 1024), 8, (2,), (1, 2, 4), (10,) * 5, 2, (8,), (128,))


def mpi_env() -> dict:
    """MPICH's progress throttle: with more ranks than cores idle ranks must yield."""
    env = dict(os.environ, MPIR_CVAR_CH4_PROGRESS_THROTTLE="1", MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT="16")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def write_synthetic(path: str, sizes: tuple[int, ...]) -> int:
    """A Kernel Tuner cache of the full product of ``sizes``, with durations in the range of
    real GPU caches (compile 0.2-2 s, benchmark 0.05-1 s) and 2 % compile failures."""
    rng = np.random.default_rng(0)
    names = [f"p{i}" for i in range(len(sizes))]
    tune_params = {n: list(range(s)) for n, s in zip(names, sizes)}
    entries = {}
    for config in itertools.product(*tune_params.values()):
        entry = dict(zip(names, config))
        entry["compile_time"] = float(rng.uniform(200, 2000))
        if rng.random() < 0.02:
            entry["time"] = "CompilationFailedConfig"
        else:
            times = rng.uniform(0.1, 5.0) * (1 + 0.01 * rng.random(7))
            entry.update(
                time=float(np.median(times)),
                times=[float(t) for t in times],
                verification_time=float(rng.uniform(5, 50)),
                benchmark_time=float(rng.uniform(50, 1000)),
            )
        entries[",".join(str(v) for v in config)] = entry
    doc = {
        "kernel_name": "synthetic",
        "device_name": "synthetic device",
        "problem_size": [1024],
        "tune_params_keys": names,
        "tune_params": tune_params,
        "cache": entries,
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return len(entries)


@contextlib.contextmanager
def timed(totals: dict, key: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        totals[key] = totals.get(key, 0.0) + time.perf_counter() - start


def rank0_loop_us(
    source: str, workdir: str, ranks: int, batch_size: int, strategy: str, budget: int, by_cost: bool = True
) -> tuple[dict, int]:
    """Microseconds per configuration of each piece of rank 0's round, in one process: ask and
    deal (``next_orders``, which also records the batch in flight), writing the results
    (``record``), telling the strategy and the progress line. The ranks' measuring is done by
    the replay backend in this process and not counted. Without ``by_cost`` the Manager has
    no cost model and deals interleaved, to show what the model costs."""
    out = os.path.join(workdir, f"loop-{Path(source).name}-{strategy}-{batch_size}-{by_cost}.h5")
    manager, cache, _ = replay_manager(source, out, ranks, batch_size, strategy, budget)
    if not by_cost:
        manager.costs = None
    backend = backends.create(manager.setup.problem, workdir, 0)
    timeline = Timeline(manager.clock)
    totals: dict[str, float] = {}
    while True:
        with timed(totals, "ask + deal"):
            orders = manager.next_orders()
        if orders[0].stop is not None:
            break
        reports = [serve(order, backend, rank, timeline) for rank, order in enumerate(orders)]
        with timed(totals, "write"):
            results = manager.record(reports)
        with timed(totals, "tell + progress"):
            manager.tell(results)
            progress_line(manager)
    cache.close()
    n = manager.measured
    return {k: 1e6 * v / n for k, v in totals.items()}, n


def replay_wall_s(source: str, workdir: str, ranks: int, batch_size: int, budget: int) -> tuple[float, str]:
    """Real wall time of a whole ``mpiexec`` replay (start-up included) and its command."""
    out = os.path.join(workdir, f"mpi-{Path(source).name}-{ranks}-{batch_size}-{budget}.h5")
    return mpi_replay(source, out, ranks, "--batch-size", str(batch_size), "--max-fevals", str(budget))


def mpi_replay(source: str, out: str, ranks: int, *flags: str) -> tuple[float, str]:
    """A brute-force replay into ``out`` under ``mpiexec``: its real wall time and its command.
    Without heartbeats: 64 ranks on 2 cores leave a rank's heartbeat thread without a core for
    longer than any liveness timeout (one such run ended itself after 21 s of start-up), and the
    replay's time is simulated, so nothing here waits on a rank that stopped answering."""
    cmd = [
        *mpiexec(),  # MPITUNE_MPIEXEC="mpirun --bind-to none" overrides it, as for tune_kernel
        "-n",
        str(ranks),
        PYTHON,
        "-m",
        "mpitune",
        "replay",
        source,
        "--strategy",
        "brute_force",
        "--liveness-timeout",
        "0",
        *flags,
        "--output",
        out,
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=mpi_env(), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, shlex.join(cmd)


def rank0_cost(name: str, source: str, workdir: str, scale: Scale) -> None:
    space_size = len(measured.load(source).configs)
    print(f"\n## Rank 0's cost per configuration: {name} ({space_size:,} configurations)")
    print("in one process, microseconds per configuration (the ranks' replayed measuring excluded):")
    print("| strategy | configs per batch | ask + deal | write | tell + progress | total |")
    print("|---|---|---|---|---|---|")
    for strategy in ("brute_force", "genetic_algorithm"):
        for batch_size in scale.batch_sizes:
            budget = min(scale.loop_configs, space_size)
            per, _ = rank0_loop_us(source, workdir, min(batch_size, 64), batch_size, strategy, budget)
            print(
                f"| {strategy} | {batch_size} | {per['ask + deal']:.1f} | {per['write']:.1f} | "
                f"{per['tell + progress']:.1f} | {sum(per.values()):.1f} |"
            )
            if strategy == "brute_force" and batch_size > 64:  # chunks of several: dealt by cost
                per, _ = rank0_loop_us(source, workdir, 64, batch_size, strategy, budget, by_cost=False)
                print(
                    f"| {strategy}, interleaved (no cost model) | {batch_size} | {per['ask + deal']:.1f} | "
                    f"{per['write']:.1f} | {per['tell + progress']:.1f} | {sum(per.values()):.1f} |"
                )
    short, long = scale.mpi_configs
    long = min(long, space_size)
    print(f"real replay on 2 ranks, brute force: (wall({long}) - wall({short})) / {long - short} configurations")
    for batch_size in scale.batch_sizes:
        wall_short, _ = replay_wall_s(source, workdir, 2, batch_size, short)
        wall_long, cmd = replay_wall_s(source, workdir, 2, batch_size, long)
        per_us = 1e6 * (wall_long - wall_short) / (long - short)
        print(
            f"  {batch_size} configs per batch: {per_us:.1f} us per configuration "
            f"(walls {wall_short:.2f} s and {wall_long:.2f} s)"
        )
    print(f"  command (long run): {cmd}")


def efficiency(name: str, source: str, workdir: str, scale: Scale) -> None:
    cost = durations(source)
    print(f"\n## Parallel efficiency, brute force: {name} ({len(cost):,} configurations)")
    print("simulated in one process with the real Manager and replay backend (racing on), default batches:")
    print("| ranks | dealt by cost | dealt interleaved | batches | simulated wall s (by cost) |")
    print("|---|---|---|---|---|")
    for ranks in scale.simulated_ranks:
        by_cost = simulated_efficiency(source, workdir, ranks, None, True)
        interleaved = simulated_efficiency(source, workdir, ranks, None, False)
        print(
            f"| {ranks} | {100 * by_cost['efficiency']:.1f} % | {100 * interleaved['efficiency']:.1f} % | "
            f"{by_cost['batches']} | {by_cost['wall_s']:.1f} |"
        )
    print(f"  command: {shlex.join(['python', *sys.argv])}")
    ranks = scale.ranks
    for per in scale.per_rank_mpi:
        out = os.path.join(workdir, f"eff-{per}.h5")
        flags = () if per is None else ("--batch-size", str(per * ranks))
        real_s, command = mpi_replay(source, out, ranks, *flags)
        s = asdict(summarize(read(out)))
        batches = "default batches" if per is None else f"{per} per rank per batch"
        print(
            f"replayed under mpiexec on {ranks} ranks, {batches}: efficiency {100 * s['efficiency']:.1f} %, "
            f"simulated wall {s['wall_s']:.1f} s ({real_s:.0f} s real)"
        )
        print(f"  command: {command}")
    print(f"{ranks} ranks, from the recorded durations (full timing), the same rounds (efficiency %):")
    print(
        "| configs per rank per batch | dealt by batching.deal (scatter/gather) | pulled one at a time within a batch "
        "| dealt, double-buffered |"
    )
    print("|---|---|---|---|")
    for per in scale.per_rank_model:
        size = per * ranks
        loads = []
        pulled = 0.0
        for batch, start in enumerate(range(0, len(cost), size)):
            ids = list(range(start, min(start + size, len(cost))))
            loads.append(np.array([float(cost[chunk].sum()) for chunk in deal(ids, ranks, batch)]))
            pulled += list_schedule_s(cost[ids], ranks)
        dealt = sum(float(load.max()) for load in loads)
        print(
            f"| {per} | {100 * cost.sum() / (ranks * dealt):.1f} | {100 * cost.sum() / (ranks * pulled):.1f} | "
            f"{100 * cost.sum() / (ranks * double_buffered_s(loads)):.1f} |"
        )
    print(f"pulled one at a time with no batches: {100 * cost.sum() / (ranks * list_schedule_s(cost, ranks)):.1f} %")


def peak_rss_mib() -> float:
    """This process' peak resident memory. Linux's VmHWM belongs to the process image, where
    ru_maxrss also keeps the peak of the parent it was forked from (a large benchmark)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_child(sizes: tuple[int, ...], strategy: str, batches: int, batch_size: int) -> None:
    """Rank 0's share of a run on a huge space: build it (with a restriction string), then
    ask and tell ``batches`` batches; prints the peak resident memory in MiB."""
    tune_params = {f"p{i}": list(range(1, s + 1)) for i, s in enumerate(sizes)}
    start = time.perf_counter()
    space = SearchSpace.build(tune_params, [Restriction("p0 * p1 <= 100", list(tune_params))])
    build_s = time.perf_counter() - start
    rss_build = peak_rss_mib()
    ask_s = 0.0
    if strategy != "none":
        rng = np.random.default_rng(0)
        searcher = strategies.create(strategy, space, 1, {})
        for _ in range(batches):
            start = time.perf_counter()
            ids = searcher.ask(batch_size)
            ask_s += time.perf_counter() - start
            searcher.tell([TIME.evaluate(Result(i, "ok", time_ms=float(rng.uniform(1, 10))), {}) for i in ids])
    peak = peak_rss_mib()
    print(
        json.dumps(
            {
                "configs": len(space),
                "build_s": build_s,
                "rss_build_mib": rss_build,
                "peak_mib": peak,
                "ask_s": ask_s / max(batches, 1),
                "table_mib": space.indices.nbytes / 2**20,
            }
        )
    )


def memory(scale: Scale) -> None:
    total = int(np.prod(scale.memory_sizes))
    print(f"\n## Rank 0's peak memory, a space of {total:,} configurations ({len(scale.memory_sizes)} parameters)")
    print("| strategy | batches of 64 asked and told | peak RSS MiB | index table MiB | build s | s per ask |")
    print("|---|---|---|---|---|---|")
    for strategy in ("none", "brute_force", "random_sample", "genetic_algorithm", "pso"):
        cmd = [
            PYTHON,
            __file__,
            "--memory-child",
            strategy,
            "--memory-sizes",
            ",".join(map(str, scale.memory_sizes)),
            "--memory-batches",
            str(scale.memory_batches),
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=mpi_env()).stdout
        r = json.loads(out.strip().splitlines()[-1])
        batches = 0 if strategy == "none" else scale.memory_batches
        print(
            f"| {strategy} | {batches} | {r['peak_mib']:.0f} | {r['table_mib']:.0f} | {r['build_s']:.2f} | "
            f"{r['ask_s']:.3f} |"
        )
    print(f"  command (one row): {shlex.join(cmd)}")


def largest_cache(directory: str) -> str | None:
    if not os.path.isdir(directory):
        return None
    found = [os.path.join(directory, f) for f in os.listdir(directory) if f.endswith((".json", ".json.gz"))]
    return max(found, key=lambda p: len(measured.load(p).configs)) if found else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--caches",
        metavar="DIR",
        help="directory of measured Kernel Tuner caches (.json, .json.gz); "
        "the largest is replayed besides the synthetic space",
    )
    p.add_argument("--quick", action="store_true", help="every part small, in seconds")
    p.add_argument("--only", choices=("cost", "efficiency", "memory"), help="run one part only")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    p.add_argument("--memory-sizes", help=argparse.SUPPRESS)
    p.add_argument("--memory-batches", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.memory_child:
        sizes = tuple(int(s) for s in args.memory_sizes.split(","))
        memory_child(sizes, args.memory_child, args.memory_batches, 64)
        return
    scale = QUICK if args.quick else FULL
    print(f"command: {shlex.join(['python', *sys.argv])}")
    with tempfile.TemporaryDirectory(prefix="mpitune-scheduler-") as tmp:
        synthetic = os.path.join(tmp, "synthetic.json")
        real = None if args.quick or not args.caches else largest_cache(args.caches)
        if args.only in (None, "cost") or (args.only == "efficiency" and not real):
            start = time.perf_counter()
            n = write_synthetic(synthetic, scale.synthetic_sizes)
            print(f"synthetic measured space: {n:,} configurations, written in {time.perf_counter() - start:.1f} s")
        if args.only in (None, "cost"):
            rank0_cost("synthetic", synthetic, tmp, scale)
            if real:
                rank0_cost(Path(real).name, real, tmp, scale)
        if args.only in (None, "efficiency"):
            efficiency(Path(real).name if real else "synthetic", real or synthetic, tmp, scale)
    if args.only in (None, "memory"):
        memory(scale)


if __name__ == "__main__":
    main()
