"""How close a brute-force run on real GPUs comes to its physical floor.

    python benchmarks/floor.py [--spec examples/matmul_cupy/spec.py] [--gpus 1 2] [--workers 15]
                               [--mpirun "mpirun --bind-to none"] [--out DIR] [--interference]

For each GPU count G, tunes the spec by brute force on G ranks (one GPU each, W compile
workers each) into a fresh file, then compares the measured wall time with

    floor = max(sum of compile time / (G * W),  sum of GPU time / G)

where the sums run over every configuration: compile time is NVRTC's (in the workers) plus
loading, GPU time is the verification run plus the timed iterations (both are work the GPU
must do; the floor with the timed iterations alone is printed too). Goal: wall <= 1.3 x floor.
The ranks' time waiting at the gather, batch by batch, is reported as well.

``--interference`` also measures one fixed configuration repeatedly on one GPU, first alone
and then while compile workers compile the whole space in the background, and prints both
medians: compiling ahead must not disturb the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mpitune.model.work import Work  # noqa: E402
from mpitune.offline.rank_time import gather_waits  # noqa: E402
from mpitune.offline.summary import summarize  # noqa: E402
from mpitune.store.reader import read  # noqa: E402

GOAL = 1.3
ROUNDS = 5  # times the whole space is queued for the workers during the interference check


def tune(spec: str, gpus: int, workers: int, mpirun: str, out: Path) -> dict:
    cache = out / f"floor-{gpus}gpu.h5"
    cache.unlink(missing_ok=True)
    # Every configuration compiled, as the floor assumes: mpitune's kernel cache off.
    pythonpath = f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = dict(os.environ, PYTHONPATH=pythonpath, MPITUNE_KERNEL_CACHE="off")
    if gpus == 1 and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = "0"
    cmd = [
        *shlex.split(mpirun),
        "-n",
        str(gpus),
        sys.executable,
        "-m",
        "mpitune",
        spec,
        "--cache",
        str(cache),
        "--strategy",
        "brute_force",
        "--compile-workers",
        str(workers),
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - started
    (out / f"floor-{gpus}gpu.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(
            f"floor: the {gpus}-GPU run failed ({proc.returncode}); see {out}/floor-{gpus}gpu.log:\n"
            + (proc.stdout + proc.stderr)[-2000:]
        )
    data = read(str(cache))
    res = data.results
    summary = asdict(summarize(data))
    compile_s = float(res["compile_s"].sum())
    gpu_s = float(res["verify_s"].sum() + res["benchmark_s"].sum())
    timed_s = float(res["benchmark_s"].sum())
    floor_s = max(compile_s / (gpus * workers), gpu_s / gpus)
    wall_s = float(data.runs["wall_s"][-1])
    return {
        "gpus": gpus,
        "workers_per_rank": workers,
        "configs": len(res),
        "statuses": {s: int((res["status"] == s).sum()) for s in sorted(set(res["status"]))},
        "wall_s": wall_s,
        "process_s": process_s,
        "compile_s": compile_s,
        "gpu_s": gpu_s,
        "timed_s": timed_s,
        "floor_s": floor_s,
        "ratio": wall_s / floor_s,
        "floor_timed_only_s": max(compile_s / (gpus * workers), timed_s / gpus),
        "efficiency": summary["efficiency"],
        "best": summary["best"],
        "gather": asdict(gather_waits(data)),
        "startup": summary["startup"],
        "per_rank": [
            {
                k: r[k]
                for k in (
                    "rank",
                    "device",
                    "configs",
                    "compile_s",
                    "verify_s",
                    "benchmark_s",
                    "wait_s",
                    "spec_s",
                    "startup_s",
                    "compile_ahead_s",
                    "wall_s",
                )
            }
            for r in summary["per_rank"]
        ],
        "command": shlex.join(cmd),
    }


def interference(spec: str, workers: int, repeats: int) -> dict:
    """One configuration's median time, measured ``repeats`` times alone and with the compile
    workers busy compiling the whole space."""
    from mpitune import backends
    from mpitune.model.timeline import Clock, Timeline
    from mpitune.process.compile_ahead import CompileAhead
    from mpitune.scheduling.prepare import prepare
    from mpitune.spec.load import load_spec
    from mpitune.spec.settings import Overrides

    with tempfile.TemporaryDirectory() as tmp:
        setup = prepare(*load_spec(spec, Overrides(cache_path=os.path.join(tmp, "x.h5"))))
        backend = backends.create(setup.problem.kernel, tmp, 0)
        backend.prepare()
        space = setup.space
        config = space.config(len(space) // 2)
        compiled = backend.compiler()(Work(0, config))

        def medians() -> list[float]:
            return [backend.run(Work(0, config, None), Timeline(), compiled).time_ms for _ in range(repeats)]

        alone = medians()
        ahead = CompileAhead(workers, Clock(), backend.compiler())
        # Several rounds of the whole space (distinct ids so none is skipped): more compiling
        # than the measurement below lasts.
        ahead.submit([Work(r * len(space) + i, space.config(i)) for r in range(ROUNDS) for i in range(len(space))])
        time.sleep(2.0)  # the workers are up and compiling
        started = time.perf_counter()
        busy = medians()
        busy_for_s = time.perf_counter() - started
        ahead.close()
        backend.close()
    return {
        "config": config,
        "repeats": repeats,
        "workers": workers,
        "alone_ms": alone,
        "busy_ms": busy,
        "alone_median_ms": statistics.median(alone),
        "busy_median_ms": statistics.median(busy),
        "measured_for_s": busy_for_s,
        "compiles_queued": ROUNDS * len(space),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=str(REPO / "examples" / "matmul_cupy" / "spec.py"))
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--workers",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2 - 1),
        help="compile workers per rank (default: half the cores, less one)",
    )
    parser.add_argument(
        "--mpirun",
        default=os.environ.get("MPITUNE_MPIEXEC", "mpirun --bind-to none"),
        help="the launcher and its options (default: $MPITUNE_MPIEXEC, else mpirun --bind-to none)",
    )
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="mpitune-floor-"))
    parser.add_argument("--interference", action="store_true")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"command: python {shlex.join(sys.argv)}")
    figures = {"runs": [], "interference": None}
    for gpus in args.gpus:
        r = tune(args.spec, gpus, args.workers, args.mpirun, out)
        figures["runs"].append(r)
        g = r["gather"]
        print(
            f"\n{gpus} GPU(s), {args.workers} compile workers per rank: {r['configs']} configurations {r['statuses']}"
        )
        print(
            f"  wall {r['wall_s']:.1f} s (process {r['process_s']:.1f} s); compile {r['compile_s']:.1f} s, "
            f"GPU {r['gpu_s']:.1f} s (timed iterations {r['timed_s']:.1f} s)"
        )
        print(
            f"  floor {r['floor_s']:.1f} s -> wall / floor = {r['ratio']:.2f} "
            f"({'meets' if r['ratio'] <= GOAL else 'misses'} the goal of {GOAL}); "
            f"with the timed iterations alone the floor is {r['floor_timed_only_s']:.1f} s "
            f"(ratio {r['wall_s'] / r['floor_timed_only_s']:.2f})"
        )
        print(
            f"  gather: in {g['waited']} of {g['rank_batches']} rank-batches a rank waited more than "
            f"{100 * g['threshold']:.0f}% of the batch for others; {g['wait_s']:.1f} s of such waiting in all"
        )
        u = r["startup"]
        print(
            f"  start-up: the spec's own loading {u['spec_s']:.2f} s on rank 0, mpitune's own start-up "
            f"{u['mpitune_min_s']:.2f} to {u['mpitune_max_s']:.2f} s per rank (benchmarks/startup.py adds "
            "what comes before the run's clock)"
        )
        for p in r["per_rank"]:
            print(
                f"  rank {p['rank']}: {p['configs']} configs, spec {p['spec_s']:.1f}, startup {p['startup_s']:.1f}, "
                f"compile (waited) "
                f"{p['compile_s']:.1f}, verify {p['verify_s']:.1f}, benchmark {p['benchmark_s']:.1f}, "
                f"wait {p['wait_s']:.1f}, wall {p['wall_s']:.1f} s; compiled in the background "
                f"{p['compile_ahead_s']:.1f} s"
            )
        if r["best"]:
            print(f"  best {r['best']['time_ms']:.4g} ms {r['best']['config']}")
        print(f"  run: {r['command']}")
    if args.interference:
        i = interference(args.spec, args.workers, args.repeats)
        figures["interference"] = i
        spread = lambda v: f"{min(v):.4f}-{max(v):.4f}"
        print(
            f"\ninterference, {i['config']}, {i['repeats']} medians, {i['workers']} workers given "
            f"{i['compiles_queued']} compiles, measured for {i['measured_for_s']:.1f} s while they worked:"
        )
        print(f"  alone: median {i['alone_median_ms']:.4f} ms (range {spread(i['alone_ms'])})")
        print(
            f"  with compiling in the background: median {i['busy_median_ms']:.4f} ms "
            f"(range {spread(i['busy_ms'])}); difference "
            f"{100 * (i['busy_median_ms'] / i['alone_median_ms'] - 1):+.2f}%"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(figures, indent=1, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
