"""mpitune against Kernel Tuner 1.5.0: the same kernel, search space, iterations and GPU.

    python benchmarks/vs_kernel_tuner.py [--spec SPEC] [--gpus 1 2] [--mpirun CMD]
        [--mpirun-args "--bind-to none"] [--out DIR] [--json PATH] [--timeout-s S]

Both tuners get what mpitune's own loader makes of SPEC (default: the CUDA matrix multiply of
examples/matmul_cupy): Kernel Tuner as ``tune_kernel(..., lang="cupy",
strategy="brute_force", cache=None)`` on one GPU (it has no multi-GPU runner besides Ray),
mpitune as ``mpirun -n G python -m mpitune SPEC --strategy brute_force`` for each G asked.
Every run starts from an empty CuPy kernel cache, new per-user folders (HOME, TMPDIR, the
CUDA driver's cache) and mpitune's kernel cache off, and is timed from its process's start to its
exit, so Python start-up, imports, uploads and the CUDA context count for both. Kernel Tuner
checks answers on the host (each output is copied back) and reports the mean of its
iterations; mpitune checks on the GPU and reports the median: that is what users of each pay
and get, and part of the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from a checkout, mpitune need not be installed

from mpitune.errors import UserError  # noqa: E402
from mpitune.model.problem import Problem  # noqa: E402
from mpitune.model.restrictions import Restriction  # noqa: E402
from mpitune.model.searchspace import SearchSpace  # noqa: E402
from mpitune.spec.load import load_spec  # noqa: E402
from mpitune.spec.settings import Overrides  # noqa: E402

DEFAULT_SPEC = REPO / "examples" / "matmul_cupy" / "spec.py"
# Issue 8's goals: mpitune's wall time as a share of Kernel Tuner's, by mpitune's GPU count.
GOALS = {1: 0.10, 2: 0.15}  # mpitune's wall time as a share of Kernel Tuner's, by GPUs
KT_VERSION = "1.5.0"
DEFAULT_BLOCK_SIZE_NAMES = ["block_size_x", "block_size_y", "block_size_z"]  # both tuners' default
TAIL_LINES = 15  # of a failed run's log, quoted in the error


def fail(message: str) -> NoReturn:
    """One line on stderr and exit code 2, as mpitune itself refuses a run."""
    print(f"vs_kernel_tuner: error: {' '.join(message.splitlines())}", file=sys.stderr)
    sys.exit(2)


def load_problem(spec_path: str, out_dir: str) -> Problem:
    """The problem exactly as mpitune tunes it. ``load_spec`` also checks that a results file
    could be written; that check points into OUT, and nothing is written there."""
    problem, _ = load_spec(spec_path, Overrides(cache_path=os.path.join(out_dir, "spec-check.h5")))
    if problem.kernel.lang != "cupy":
        raise UserError(f"{spec_path}: lang is {problem.kernel.lang!r}; this comparison is for lang = 'cupy'")
    return problem


def kt_restriction(restriction: Restriction | Callable, names: list[str]) -> str | Callable:
    """A restriction as Kernel Tuner 1.5.0 applies it to the same configurations. Strings go
    as written. A spec's callable takes the config dict; in a list Kernel Tuner calls it with
    the parameter values instead (positionally while building the space, by name when
    checking a config), so it gets the user's function behind one that accepts both."""
    if isinstance(restriction, Restriction):
        return restriction.text
    user_fn = getattr(restriction, "__wrapped__", restriction)  # mpitune's guard blames the spec

    def on_values(*values: Any, **named: Any) -> bool:
        return bool(user_fn(named or dict(zip(names, values))))

    return on_values


def kt_arguments(problem: Problem) -> dict[str, Any]:
    """``tune_kernel``'s keyword arguments for the same problem: brute force, no cache to
    reuse, nothing printed per configuration."""
    return {
        "kernel_name": problem.kernel.kernel_name,
        "kernel_source": problem.kernel.kernel_source,
        "problem_size": tuple(problem.kernel.problem_size),
        "arguments": list(problem.kernel.arguments),
        "tune_params": {name: list(values) for name, values in problem.kernel.tune_params.items()},
        "restrictions": [kt_restriction(r, list(problem.kernel.tune_params)) for r in problem.restrictions] or None,
        "grid_div_x": problem.kernel.grid_div.get("x"),
        "grid_div_y": problem.kernel.grid_div.get("y"),
        "grid_div_z": problem.kernel.grid_div.get("z"),
        # Kernel Tuner warns about default names that are not tuned, and appends to the list.
        "block_size_names": None
        if list(problem.kernel.block_size_names) == DEFAULT_BLOCK_SIZE_NAMES
        else list(problem.kernel.block_size_names),
        "answer": problem.kernel.answer,
        "atol": problem.kernel.atol,
        "compiler_options": list(problem.kernel.compiler_options),
        "iterations": problem.kernel.iterations,
        "lang": "cupy",
        "strategy": "brute_force",
        "cache": None,
        "verbose": False,
        "quiet": True,
    }


def config_key(config: dict, names: list[str]) -> tuple:
    """A configuration as a hashable tuple of plain values, in ``tune_params`` order."""
    return tuple(v.item() if hasattr(v, "item") else v for v in (config[n] for n in names))


def _uuid_of_16_bytes() -> None:
    """Kernel Tuner 1.5.0's CuPy backend reads the device's UUID as 16 bytes
    (``uuid.UUID(bytes=props["uuid"])``) and stops at start where CuPy's device properties give
    it otherwise (seen with CuPy 14.2 on an H100 and an H200: "bytes is not a 16-char string").
    The UUID only labels the device in Kernel Tuner's environment record, so its properties are
    handed over with the UUID as 16 bytes; nothing that tunes or times changes."""
    import uuid

    import cupy

    runtime = cupy.cuda.runtime
    original = runtime.getDeviceProperties

    def properties(device: int) -> dict:
        props = dict(original(device))
        raw = props.get("uuid")
        if isinstance(raw, str):
            try:
                props["uuid"] = uuid.UUID(raw.removeprefix("GPU-")).bytes
            except ValueError:
                props["uuid"] = raw.encode()[:16].ljust(16, b"\0")
        elif isinstance(raw, (bytes, bytearray)) and len(raw) != 16:
            props["uuid"] = bytes(raw[:16]).ljust(16, b"\0")
        return props

    runtime.getDeviceProperties = properties


def kt_child(spec_path: str, result_path: str) -> None:
    """Runs in its own process: Kernel Tuner's whole run, imports included, as a user's
    script would do it. Writes every result and Kernel Tuner's own timings as JSON."""
    started_s = time.perf_counter()
    import kernel_tuner

    import_s = time.perf_counter() - started_s
    problem = load_problem(spec_path, os.path.dirname(result_path))
    _uuid_of_16_bytes()
    results, env = kernel_tuner.tune_kernel(**kt_arguments(problem))
    names = list(problem.kernel.tune_params)
    timings_ms = {
        k: float(env[k])
        for k in (
            "total_compile_time",
            "total_verification_time",
            "total_benchmark_time",
            "total_framework_time",
            "total_strategy_time",
            "overhead_time",
        )
        if k in env
    }
    out = {
        "version": kernel_tuner.__version__,
        "device": str(env.get("device_name", "?")),
        "import_s": import_s,
        # Kernel Tuner's own clock: tune_kernel's start to its end, split as it reports it.
        "reported_s": sum(timings_ms.values()) / 1e3 if "overhead_time" in timings_ms else None,
        "timings_ms": timings_ms,
        "results": [_kt_result(r, names) for r in results],
    }
    Path(result_path).write_text(json.dumps(out))


def _kt_result(result: dict, names: list[str]) -> dict:
    """One Kernel Tuner result: a failed configuration has an error object for its time."""
    time_ms = result.get("time")
    failed = "__error__" in result or not isinstance(time_ms, float)
    return {
        "config": dict(zip(names, config_key(result, names))),
        "time_ms": None if failed else time_ms,
        "error": str(result.get("__error__", time_ms)) if failed else None,
    }


def fresh_env(run_dir: Path) -> dict[str, str]:
    """The environment of one run: an empty CuPy kernel cache and mpitune's off, so every kernel
    compiles, and new, empty per-user folders (HOME, XDG_CACHE_HOME, TMPDIR, the CUDA driver's
    CUDA_CACHE_PATH), so that no cache a tool keeps there carries over from an earlier run."""
    folders = {
        name: run_dir / name.lower()
        for name in ("CUPY_CACHE_DIR", "HOME", "XDG_CACHE_HOME", "TMPDIR", "CUDA_CACHE_PATH")
    }
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    return dict(os.environ, MPITUNE_KERNEL_CACHE="off", **{name: str(f) for name, f in folders.items()})


def run_timed(cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> float:
    """Wall time of a command from process start to exit; its output goes to ``log_path``.
    A failure or a timeout ends the benchmark with the log's tail."""
    with open(log_path, "w") as log:
        started_s = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # mpirun and its ranks, or the child and its workers
            proc.wait()
            fail(f"{shlex.join(cmd)} did not finish in {timeout_s:g} s; log: {log_path}")
        wall_s = time.perf_counter() - started_s
    if rc != 0:
        tail = " | ".join(log_path.read_text(errors="replace").splitlines()[-TAIL_LINES:])
        fail(f"{shlex.join(cmd)} exited with {rc}; log {log_path}: {tail}")
    return wall_s


def run_kernel_tuner(spec: str, names: list[str], out_dir: Path, timeout_s: float) -> dict:
    """Kernel Tuner on GPU 0 in a child process; its row of the table."""
    run_dir = out_dir / "kernel_tuner"
    run_dir.mkdir(parents=True, exist_ok=True)
    result_path = run_dir / "results.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--spec", spec, "--kt-child", str(result_path)]
    wall_s = run_timed(cmd, fresh_env(run_dir), run_dir / "log.txt", timeout_s)
    child = json.loads(result_path.read_text())
    times_ms = {config_key(r["config"], names): r["time_ms"] for r in child["results"] if r["time_ms"] is not None}
    best = min(times_ms, key=times_ms.get) if times_ms else None
    return {
        "tuner": f"Kernel Tuner {child['version']}",
        "gpus": 1,
        "wall_s": wall_s,
        "own_s": child["reported_s"],
        "import_s": child["import_s"],
        "configs": len(child["results"]),
        "ok": len(times_ms),
        "best": best,
        "best_time_ms": times_ms.get(best),
        "devices": [child["device"]],
        "timings_ms": child["timings_ms"],
        "times_ms": times_ms,
        "log": str(run_dir / "log.txt"),
    }


def run_mpitune(spec: str, gpus: int, mpirun: list[str], out_dir: Path, timeout_s: float) -> dict:
    """mpitune on ``gpus`` ranks (one GPU each) under mpirun; its row of the table."""
    from mpitune.offline.summary import summarize
    from mpitune.store.reader import read  # h5py: not for the Kernel Tuner child to load

    run_dir = out_dir / f"mpitune-{gpus}gpu"
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = run_dir / "results.h5"
    cache.unlink(missing_ok=True)  # a rerun into the same --out measures everything again
    cmd = [
        *mpirun,
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
    ]
    env = fresh_env(run_dir)
    # The ranks run this checkout's mpitune, the one whose loader made the problem above.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    wall_s = run_timed(cmd, env, run_dir / "log.txt", timeout_s)
    data = read(str(cache))
    summary = asdict(summarize(data))  # what `python -m mpitune report CACHE --json` prints
    names = data.param_names
    ok = data.results[data.results["status"] == "ok"]
    times_ms = {config_key(row, names): float(row["time_ms"]) for row in ok}
    best = summary["best"]
    return {
        "tuner": "mpitune",
        "gpus": gpus,
        "wall_s": wall_s,
        "own_s": float(data.runs["wall_s"][-1]),
        "import_s": None,
        "configs": summary["configs"],
        "ok": summary["ok"],
        "best": config_key(best["config"], names) if best else None,
        "best_time_ms": best["time_ms"] if best else None,
        "devices": sorted({d["device"] for d in summary["devices"]}),
        "times_ms": times_ms,
        "log": str(run_dir / "log.txt"),
    }


def compare_best(kt: dict, mt: dict) -> dict:
    """Whether both found the same best configuration; if not, each best as both measured it,
    and how far apart the two bests are in each tuner's own measurements (near-equal
    configurations may swap places from run to run)."""
    same = kt["best"] == mt["best"]
    out: dict[str, Any] = {"gpus": mt["gpus"], "same": same}
    if not same:
        out["kt_best"] = {
            "config": kt["best"],
            "kt_ms": kt["times_ms"].get(kt["best"]),
            "mpitune_ms": mt["times_ms"].get(kt["best"]),
        }
        out["mpitune_best"] = {
            "config": mt["best"],
            "kt_ms": kt["times_ms"].get(mt["best"]),
            "mpitune_ms": mt["times_ms"].get(mt["best"]),
        }
        out["kt_gap"] = _gap(out["mpitune_best"]["kt_ms"], out["kt_best"]["kt_ms"])
        out["mpitune_gap"] = _gap(out["kt_best"]["mpitune_ms"], out["mpitune_best"]["mpitune_ms"])
    return out


def _gap(other_ms: float | None, best_ms: float | None) -> float | None:
    """How much slower the other tuner's best is than this tuner's own, as a fraction."""
    return None if other_ms is None or best_ms is None else (other_ms - best_ms) / best_ms


def ratio(kt: dict, mt: dict) -> dict:
    """mpitune's wall time as a share of Kernel Tuner's, against the issue's goal if any."""
    share = mt["wall_s"] / kt["wall_s"]
    goal = GOALS.get(mt["gpus"])
    return {"gpus": mt["gpus"], "ratio": share, "goal": goal, "passed": None if goal is None else share <= goal}


def _config_text(key: tuple | None, names: list[str]) -> str:
    return "-" if key is None else ", ".join(f"{n}={v}" for n, v in zip(names, key))


def _ms(value: float | None) -> str:
    return "failed" if value is None else f"{value:.4g} ms"


ROW = "{:<20} {:>4} {:>8} {:>8} {:>8} {:>5} {:>10}  {}"


def print_row(row: dict, names: list[str]) -> None:
    own = "-" if row["own_s"] is None else f"{row['own_s']:.1f}"
    best = "-" if row["best_time_ms"] is None else f"{row['best_time_ms']:.4g}"
    print(
        ROW.format(
            row["tuner"],
            row["gpus"],
            f"{row['wall_s']:.1f}",
            own,
            row["configs"],
            row["ok"],
            best,
            _config_text(row["best"], names),
        ),
        flush=True,
    )


def print_kt_split(kt: dict) -> None:
    """Where Kernel Tuner's wall time went, as far as it says: its import, and its own totals."""
    split = ", ".join(
        f"{k.replace('total_', '').replace('_time', '')} {v / 1e3:.1f}" for k, v in kt["timings_ms"].items()
    )
    print(
        f"\nKernel Tuner: `import kernel_tuner` took {kt['import_s']:.1f} s of its wall time; "
        f"its own totals (s): {split or 'not reported'}"
    )


def print_comparison(kt: dict, rows: list[dict], names: list[str]) -> tuple[list[dict], list[dict]]:
    """The ratios against the goals and the best-configuration check, one block per GPU count."""
    ratios, bests = [ratio(kt, mt) for mt in rows], [compare_best(kt, mt) for mt in rows]
    print()
    for r in ratios:
        verdict = "no goal" if r["goal"] is None else f"goal <= {r['goal']}: {'PASS' if r['passed'] else 'FAIL'}"
        print(f"mpitune / Kernel Tuner wall time, {r['gpus']} GPU(s): {r['ratio']:.3f} ({verdict})")
    for b in bests:
        print(f"same best configuration (mpitune on {b['gpus']} GPU(s)): {'yes' if b['same'] else 'no'}")
        if b["same"]:
            continue
        for label, best in (("Kernel Tuner's best", b["kt_best"]), ("mpitune's best", b["mpitune_best"])):
            print(
                f"  {label}: {_config_text(best['config'], names)}: {_ms(best['kt_ms'])} by Kernel Tuner, "
                f"{_ms(best['mpitune_ms'])} by mpitune"
            )
        gaps = [
            f"{who} {100 * gap:.2f}%"
            for who, gap in (("Kernel Tuner", b["kt_gap"]), ("mpitune", b["mpitune_gap"]))
            if gap is not None
        ]
        print(f"  the other's best is slower than its own by: {', '.join(gaps) or 'n/a'}")
    return ratios, bests


def gpu_names() -> list[str]:
    """Names of the visible GPUs. CUDA is initialised here and stays so for the whole
    benchmark, so the driver is loaded before either tuner starts, not by the first one.
    No context is created: a GPU in exclusive-process mode stays free for the tuners."""
    try:
        import cupy
    except ImportError as exc:
        fail(f"needs CuPy: pip install cupy-cuda12x (or the wheel matching your CUDA) ({exc})")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        names = []
        for index in range(count):
            name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
            names.append(name.decode() if isinstance(name, bytes) else name)
    except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError) as exc:
        fail(f"no usable CUDA GPU on this machine ({exc})")
    if not names:
        fail("no usable CUDA GPU on this machine (none visible)")
    return names


def check_kernel_tuner() -> str:
    """Kernel Tuner's version; importing it here fails fast on a missing dependency (and
    loads its files once, as the parent does for mpitune's, so neither starts from cold disk)."""
    try:
        import kernel_tuner
    except ImportError as exc:
        fail(f"needs Kernel Tuner {KT_VERSION}: pip install kernel-tuner=={KT_VERSION} ({exc})")
    return kernel_tuner.__version__


def mpirun_command(mpirun: str, mpirun_args: str) -> list[str]:
    cmd = shlex.split(mpirun)
    if not cmd or not shutil.which(cmd[0]):
        fail(f"no MPI launcher {mpirun!r} on PATH; pass --mpirun")
    return cmd + shlex.split(mpirun_args)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=str(DEFAULT_SPEC), help="spec file (default: examples/matmul_cupy/spec.py)")
    p.add_argument(
        "--gpus", type=int, nargs="+", help="mpitune's GPU counts (default: 1, and 2 where the machine has 2 or more)"
    )
    p.add_argument(
        "--mpirun",
        default="mpirun" if shutil.which("mpirun") else "mpiexec",
        help="MPI launcher (default: mpirun if on PATH, else mpiexec)",
    )
    p.add_argument("--mpirun-args", default="--bind-to none", help="launcher flags (default: %(default)s)")
    p.add_argument("--out", help="keep the HDF5 files, Kernel Tuner's results and the logs here")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--timeout-s", type=float, default=1800, help="limit for each tuner's run (default: %(default)s)")
    p.add_argument("--kt-child", metavar="JSON", help=argparse.SUPPRESS)  # the Kernel Tuner process
    return p.parse_args(argv)


def benchmark(args: argparse.Namespace, out_dir: Path) -> dict:
    """Check everything needed, then Kernel Tuner once and mpitune on each GPU count,
    printing each row as its run ends."""
    kt_version = check_kernel_tuner()
    names_of_gpus = gpu_names()
    mpirun = mpirun_command(args.mpirun, args.mpirun_args)
    gpu_counts = args.gpus or ([1, 2] if len(names_of_gpus) >= 2 else [1])
    if max(gpu_counts) > len(names_of_gpus) or min(gpu_counts) < 1:
        fail(f"--gpus {' '.join(map(str, gpu_counts))}: this machine has {len(names_of_gpus)} GPU(s)")
    try:
        problem = load_problem(args.spec, str(out_dir))
    except UserError as exc:
        fail(str(exc))
    space_size = len(SearchSpace.build(problem.kernel.tune_params, problem.restrictions))
    names = list(problem.kernel.tune_params)
    command = shlex.join(["python", *sys.argv])
    print(f"command: {command}")
    print(
        f"problem: {problem.kernel.kernel_name} from {args.spec}, "
        f"problem size {'x'.join(map(str, problem.kernel.problem_size))}, "
        f"{space_size} configurations after restrictions, {problem.kernel.iterations} iterations, brute force"
    )
    print(f"GPUs: {len(names_of_gpus)} ({', '.join(sorted(set(names_of_gpus)))}); Kernel Tuner {kt_version}")
    print(
        "wall_s: process start to exit, each run from an empty CuPy kernel cache; own_s: the tuner's own clock "
        "(Kernel Tuner: tune_kernel; mpitune: the run in its HDF5 file)"
    )
    print(
        "Kernel Tuner checks answers on the host and reports the mean of its iterations; "
        "mpitune checks on the GPU and reports the median"
    )
    print()
    print(ROW.format("tuner", "GPUs", "wall_s", "own_s", "configs", "ok", "best_ms", "best configuration"))
    kt = run_kernel_tuner(args.spec, names, out_dir, args.timeout_s)
    print_row(kt, names)
    rows = []
    for gpus in gpu_counts:
        rows.append(run_mpitune(args.spec, gpus, mpirun, out_dir, args.timeout_s))
        print_row(rows[-1], names)
    print_kt_split(kt)
    if kt["configs"] != space_size:
        print(f"WARNING: Kernel Tuner measured {kt['configs']} configurations, mpitune's space has {space_size}")
    ratios, bests = print_comparison(kt, rows, names)
    return {
        "command": command,
        "spec": args.spec,
        "space_size": space_size,
        "iterations": problem.kernel.iterations,
        "param_names": names,
        "gpus": names_of_gpus,
        "kernel_tuner_version": kt_version,
        "runs": [_json_row(r, names) for r in [kt, *rows]],
        "ratios": ratios,
        "best": [_json_best(b, names) for b in bests],
    }


def _json_row(row: dict, names: list[str]) -> dict:
    out = {k: v for k, v in row.items() if k != "times_ms"}
    out["best"] = None if row["best"] is None else dict(zip(names, row["best"]))
    return out


def _json_best(best: dict, names: list[str]) -> dict:
    out = dict(best)
    for key in ("kt_best", "mpitune_best"):
        if key in out and out[key]["config"] is not None:
            out[key] = {**out[key], "config": dict(zip(names, out[key]["config"]))}
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.kt_child:
        kt_child(args.spec, args.kt_child)
        return
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        figures = benchmark(args, Path(args.out).resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="vs-kernel-tuner-") as tmp:
            figures = benchmark(args, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
