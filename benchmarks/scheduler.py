"""What scheduling costs: rank 0's time per configuration, parallel efficiency on many ranks,
and rank 0's memory for a space of 10 million configurations.

    python benchmarks/scheduler.py [--caches DIR] [--quick] [--only cost|efficiency|memory]

1. Rank 0's cost per configuration, on a synthetic measured space (a Kernel Tuner cache of
   200,000 configurations the script writes into a temporary directory) and on the largest
   cache in DIR. First in one process with the real pieces of rank 0's work (its ``Handouts``
   and ``Manager`` with its strategy, a real HDF5 cache and the replay backend standing in for
   the ranks), by the default schedule (refill on several ranks) and with batches, timing each
   piece with ``perf_counter``; then as the real wall time of ``mpiexec -n 2 python -m mpitune
   replay``: the difference between a long and a short run, per extra configuration, is
   everything the loop costs per configuration (the messages included), while the replayed
   measuring itself costs microseconds.
2. Parallel efficiency of a brute-force replay of the largest cache in DIR: sum over ranks of
   compile + verify + benchmark time / (ranks x simulated wall). First simulated in one process
   on 8, 64 and 256 ranks with the real rounds and Manager by the default schedule (refill)
   and by batches, each dealing by predicted cost and interleaved, with the replay backend's
   recorded durations;
   then replayed under ``mpiexec`` on 64 ranks by the default schedule (on a
   2-core machine: the clock is simulated, so oversubscription changes the real time only),
   read from the run's HDF5 file as ``mpitune report`` does; and for every batch size from the
   recorded durations directly (rounds of batches, dealt by ``batching.deal``), next to what ranks
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
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from replay_rounds import double_buffered_s, durations, list_schedule_s, replay_manager, simulated_efficiency  # noqa: E402

from mpitune import backends, strategies  # noqa: E402
from mpitune.api.launch import mpiexec  # noqa: E402
from mpitune.model.objective import Objective  # noqa: E402
from mpitune.model.problem import Schedule  # noqa: E402
from mpitune.model.restrictions import Restriction  # noqa: E402
from mpitune.model.result import Result  # noqa: E402
from mpitune.model.searchspace import SearchSpace  # noqa: E402
from mpitune.model.timeline import Timeline  # noqa: E402
from mpitune.offline.summary import summarize  # noqa: E402
from mpitune.scheduling.batching import deal  # noqa: E402
from mpitune.scheduling.costs import CostModel  # noqa: E402
from mpitune.scheduling.handouts import Handouts  # noqa: E402
from mpitune.scheduling.messages import Order  # noqa: E402
from mpitune.scheduling.rank import carry_out  # noqa: E402
from mpitune.scheduling.run_record import progress_line  # noqa: E402
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
    source: str,
    workdir: str,
    ranks: int,
    batch_size: int,
    strategy: str,
    budget: int,
    by_cost: bool = True,
    schedule: Schedule = Schedule.AUTO,
) -> tuple[dict, int]:
    """Microseconds per configuration of each piece of rank 0's work, in one process, driving
    its ``Handouts`` (scheduling/handouts.py) by hand as ``rounds.Rank0Rounds`` does: ask and
    deal (``Handouts.hand_outs``, which also records each hand-out in flight), writing each
    report (``Handouts.record``), and telling the strategy and the progress line
    (``Manager.tell``, ``progress_line``), by ``schedule`` (auto: refill on several ranks). The
    ranks' measuring is done by the replay backend in this process, one order at a time in the
    order they went out after each report, and not counted; nor are the messages. Without
    ``by_cost`` the Manager has no cost model (its ``cost_model`` keyword gives None) and deals
    interleaved, to show what the model costs."""
    name = f"loop-{Path(source).name}-{strategy}-{batch_size}-{by_cost}-{schedule.value}.h5"
    cost_model: Callable[[SearchSpace], CostModel | None] = CostModel if by_cost else (lambda space: None)
    out = os.path.join(workdir, name)
    manager, cache, _ = replay_manager(source, out, ranks, batch_size, strategy, budget, schedule, cost_model)
    handouts = Handouts(manager)
    backend = backends.create(manager.setup.problem.kernel, workdir, 0)
    timeline = Timeline(manager.clock)
    totals: dict[str, float] = {}
    sent: deque[tuple[int, Order]] = deque()  # orders out, not yet reported, in the order they went
    while True:
        with timed(totals, "ask + deal"):
            for orders in handouts.hand_outs():
                sent.extend((rank, order) for rank, order in orders.items() if order.stop is None)
        if not sent:
            break  # the order to stop went out, and every report is in
        rank, order = sent.popleft()
        report = carry_out(order, backend, rank, timeline)
        with timed(totals, "write"):
            recorded = handouts.record(rank, report)
        with timed(totals, "tell + progress"):
            if recorded.told:
                manager.tell(recorded.told)
            if recorded.completed:
                progress_line(manager)
    assert manager.stop_sent and not handouts.busy
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
    print("refilled (the default) unless the row says batches; --batch-size is what a refilled chunk is")
    print("bounded by: batch size / ranks per rank (ranks: the batch size, at most 64):")
    print("| strategy | batch size | ask + deal | write | tell + progress | total |")
    print("|---|---|---|---|---|---|")
    budget = min(scale.loop_configs, space_size)
    for strategy in ("brute_force", "genetic_algorithm"):
        for batch_size in scale.batch_sizes:
            ranks = min(batch_size, 64)
            rows = [(strategy, rank0_loop_us(source, workdir, ranks, batch_size, strategy, budget)[0])]
            batches = rank0_loop_us(source, workdir, ranks, batch_size, strategy, budget, schedule=Schedule.BATCHES)
            rows.append((f"{strategy}, batches", batches[0]))
            if strategy == "brute_force" and batch_size > 64:  # chunks of several: dealt by cost
                blind = rank0_loop_us(source, workdir, ranks, batch_size, strategy, budget, by_cost=False)
                rows.append((f"{strategy}, interleaved (no cost model)", blind[0]))
            for label, per in rows:
                print(
                    f"| {label} | {batch_size} | {per['ask + deal']:.1f} | {per['write']:.1f} | "
                    f"{per['tell + progress']:.1f} | {sum(per.values()):.1f} |"
                )
    short, long = scale.mpi_configs
    long = min(long, space_size)
    print(
        f"real replay on 2 ranks, brute force, the default schedule: (wall({long}) - wall({short})) / "
        f"{long - short} configurations"
    )
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
    print(
        "simulated in one process with the real rounds, Manager and replay backend (racing on), "
        "the default schedule (refill), default batch size:"
    )
    print("(a refilled chunk that goes to one rank alone is the same dealt either way; batches for comparison)")
    print(
        "| ranks | dealt by cost | dealt interleaved | hand-outs | simulated wall s (by cost) "
        "| batches, by cost | batches, interleaved |"
    )
    print("|---|---|---|---|---|---|---|")
    for ranks in scale.simulated_ranks:
        by_cost = simulated_efficiency(source, workdir, ranks, None, True)
        interleaved = simulated_efficiency(source, workdir, ranks, None, False)
        batches = [simulated_efficiency(source, workdir, ranks, None, c, Schedule.BATCHES) for c in (True, False)]
        print(
            f"| {ranks} | {100 * by_cost['efficiency']:.1f} % | {100 * interleaved['efficiency']:.1f} % | "
            f"{by_cost['batches']} | {by_cost['wall_s']:.1f} | {100 * batches[0]['efficiency']:.1f} % | "
            f"{100 * batches[1]['efficiency']:.1f} % |"
        )
    print(f"  command: {shlex.join(['python', *sys.argv])}")
    ranks = scale.ranks
    for per in scale.per_rank_mpi:
        out = os.path.join(workdir, f"eff-{per}.h5")
        flags = () if per is None else ("--batch-size", str(per * ranks))
        real_s, command = mpi_replay(source, out, ranks, *flags)
        s = asdict(summarize(read(out)))
        batches = "default batch size" if per is None else f"{per} per rank per batch"
        print(
            f"the default schedule (refill) replayed under mpiexec on {ranks} ranks, {batches}: "
            f"efficiency {100 * s['efficiency']:.1f} %, "
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
