"""Per-rank start-up of a tuning run, beyond the spec's own loading, from the run's own file.

    python benchmarks/startup.py [--spec SPEC] [--ranks 1 2] [--max-fevals N] [--repeat K]

Runs ``MPIEXEC -n N python -m mpitune SPEC --max-fevals N --strategy brute_force`` (the
launcher of ``mpitune.api.launch``: the venv's ``mpiexec``, else the one on PATH;
``MPITUNE_MPIEXEC="mpirun --bind-to none ..."`` overrides it, as on a GPU machine with Open MPI)
and splits each rank's time from the launch to its first configuration:

- before the clock: from starting the launcher to the run's clock (``runs.started_unix``),
  which begins when rank 0 begins loading the spec (scheduling/preloaded.py): the launcher, Python,
  the command line and the spawn of the measuring worker; one figure for all ranks;
- spec: rank 0 loading the spec (phase ``spec``: the spec file's own code and the checks of
  what it defines), while MPI starts beside it; the other ranks wait for it;
- start-up: mpitune's own start-up phases on the clock (MPI's start where it outlasts the
  spec, the problem's broadcast, the backend: the CUDA context and the uploads on a GPU, the
  file), and waiting for other ranks before the first batch;
- the rank's measuring worker (phase ``worker_start``, beside the others): when it was spawned
  and when it was warm (its Python, its imports, on a GPU CuPy and the CUDA context), both from
  the launch; spawned before the clock, it started before MPI and the spec (scheduling/before_mpi.py);
- the first configuration's compile phase, past the first configuration: compiling it, or
  waiting for a compile worker (on a GPU) that is still starting.

Start-up beyond the spec = the time to a rank's first configuration less the spec phase; goal
at most 1 s. What starts beside the spec (MPI, the workers) takes cores from it, so the spec
phase of a job can be longer than the spec takes alone; the script also loads the spec alone,
in a fresh Python with nothing beside it, and prints the time to the first configuration
beyond that too: the stricter figure. The backend is the spec's ``lang``: ``examples/matmul_c/spec.py`` (the default)
times the C backend, ``examples/matmul_cupy/spec.py`` the CUDA one. ``--importtime`` also
prints the heaviest imports of one rank's modules (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mpitune.api.launch import job_environment, mpiexec  # noqa: E402
from mpitune.spec.peek import named_lang  # noqa: E402
from mpitune.store.reader import read  # noqa: E402

MEASURING = ("compile", "verify", "benchmark")
WORKER_START = "worker_start"  # the background phase of a rank's measuring worker (process/isolation.py)
GOAL_S = 1.0  # per-rank start-up beyond the spec's own loading
# What a rank imports before MPI starts: the command line, and the loop (which imports mpi4py).
RANK_IMPORTS = "import mpitune.cli, mpitune.scheduling.run"
# What a rank imports before it spawns its measuring worker (scheduling/before_mpi.py).
BEFORE_SPAWN_IMPORTS = "import mpitune.cli, mpitune.scheduling.before_mpi"
# What the worker imports before it warms up its device: the worker's module and the backend
# (for CuPy: CuPy itself; ``prewarm`` with no device imports only).
WORKER_IMPORTS = (
    "import mpitune.process.worker; from mpitune import backends; "
    "backends.prewarm(backends.resolve({lang!r}).lang, None)"
)


def run_once(spec: str, ranks: int, max_fevals: int, workdir: str) -> tuple[list[dict], str]:
    """One run of ``ranks`` ranks: each rank's start-up split as the module says, and the command."""
    out = os.path.join(workdir, f"startup-{ranks}-{time.monotonic_ns()}.h5")
    cmd = [*mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", spec, "--out", out]
    cmd += ["--max-fevals", str(max_fevals), "--strategy", "brute_force"]
    launched_unix = time.time()
    # The first configuration compiled, not loaded from an earlier run's: mpitune's kernel cache off.
    env = dict(job_environment(str(REPO)), MPITUNE_KERNEL_CACHE="off")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    data = read(out)
    before_clock_s = float(data.runs["started_unix"][-1]) - launched_unix
    timeline = data.timeline[data.timeline["run"] == data.runs["run"][-1]]
    spec_s = float((timeline["end_s"] - timeline["start_s"])[timeline["phase"] == "spec"].sum())
    out_rows = []
    for rank in range(ranks):
        mine = timeline[timeline["rank"] == rank]
        first_s = float(mine["start_s"][np.isin(mine["phase"], MEASURING)].min())
        worker = mine[mine["phase"] == WORKER_START]
        compiles = np.sort(mine[mine["phase"] == "compile"], order="start_s")
        before = mine[(mine["end_s"] <= first_s) & (mine["phase"] != WORKER_START)]
        seconds = before["end_s"] - before["start_s"]
        out_rows.append(
            {
                "rank": rank,
                "before_clock_s": before_clock_s,
                "spec_s": spec_s,
                "startup_s": float(seconds[before["phase"] == "startup"].sum()),
                "wait_s": float(seconds[before["phase"] == "wait"].sum()),
                "first_s": before_clock_s + first_s,
                "beyond_spec_s": before_clock_s + first_s - spec_s,
                # The first worker's (a restart adds more); NaN without one (no isolation).
                "worker_spawned_s": before_clock_s + float(worker["start_s"][0]) if len(worker) else np.nan,
                "worker_warm_s": before_clock_s + float(worker["end_s"][0]) if len(worker) else np.nan,
                # The wait for the first configuration's kernel: compiling it, or waiting for
                # a compile worker that started late.
                "first_compile_s": float(compiles["end_s"][0] - compiles["start_s"][0]) if len(compiles) else np.nan,
            }
        )
    return out_rows, shlex.join(cmd)


# What the phase ``spec`` holds: the spec loader's import (numpy with it: a rank imports
# neither before) and the load.
SPEC_ALONE = (
    "import sys, time; t = time.perf_counter(); from mpitune.spec.load import load_spec; "
    "load_spec(sys.argv[1]); print(time.perf_counter() - t)"
)


def spec_alone_s(spec: str, repeat: int) -> float:
    """The median time of loading ``spec`` as the phase ``spec`` counts it (the loader's import,
    the spec's code and mpitune's checks) in a fresh Python, alone on the machine."""
    times = []
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-c", SPEC_ALONE, spec], env=job_environment(str(REPO)), capture_output=True, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"loading {spec} alone failed:\n{proc.stderr}")
        times.append(float(proc.stdout.split()[-1]))
    return float(np.median(times))


def import_times(statement: str) -> list[tuple[int, int, int, str]]:
    """(own us, with its imports us, depth, module) of each import ``python -X importtime -c
    STATEMENT`` makes, in a fresh interpreter with this repository first on the path."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        env=job_environment(str(REPO)),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own_text, cumulative_text, name = line[len("import time:") :].split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2  # importtime indents by two per level
        rows.append((int(own_text), int(cumulative_text), depth, name.strip()))
    return rows


def import_breakdown(top: int, lang: str | None) -> None:
    """The heaviest imports of a rank's modules (``-X importtime``): those imported by
    ``RANK_IMPORTS`` or by the modules it names directly, with everything they import; and the
    totals of what the rank imports before it spawns its worker, and of the worker's own."""
    rows = import_times(RANK_IMPORTS)
    total_s = sum(own for own, _, _, _ in rows) / 1e6
    print(f"\nimports of one rank ({RANK_IMPORTS}; MPI initialises as mpi4py.MPI is imported): {total_s:.2f} s")
    print("| module | with its imports s | own s |")
    print("|---|---|---|")
    shown = [(cumulative, own, f"{'> ' * depth}{name}") for own, cumulative, depth, name in rows if depth <= 1]
    for cumulative_us, own_us, module in sorted(shown, reverse=True)[:top]:
        print(f"| {module} | {cumulative_us / 1e6:.3f} | {own_us / 1e6:.3f} |")
    print(f"  command: {shlex.join([sys.executable, '-X', 'importtime', '-c', RANK_IMPORTS])}")
    before_s = sum(own for own, _, _, _ in import_times(BEFORE_SPAWN_IMPORTS)) / 1e6
    print(f"imports of a rank before it spawns its worker ({BEFORE_SPAWN_IMPORTS}): {before_s:.2f} s")
    if lang:
        statement = WORKER_IMPORTS.format(lang=lang)
        worker_s = sum(own for own, _, _, _ in import_times(statement)) / 1e6
        print(f"imports of the worker before its device ({statement}): {worker_s:.2f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=str(REPO / "examples" / "matmul_c" / "spec.py"), help="the spec to start")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="ranks of each run (default 1 2)")
    p.add_argument("--max-fevals", type=int, default=2, help="configurations per run (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="runs per rank count; the median is printed")
    p.add_argument("--importtime", action="store_true", help="also break one rank's imports down")
    args = p.parse_args()
    print(f"command: {shlex.join(['python', *sys.argv])}")
    print(f"spec: {args.spec}; launcher: {shlex.join(mpiexec())}")
    print(
        "| ranks | rank | before the clock s | spec s | start-up s | waiting s | to first config s | beyond spec s "
        "| worker spawned s | worker warm s | first compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst_s = worst_first_s = 0.0
    with tempfile.TemporaryDirectory(prefix="mpitune-startup-") as tmp:
        for ranks in args.ranks:
            runs = [run_once(args.spec, ranks, args.max_fevals, tmp) for _ in range(args.repeat)]
            for rank in range(ranks):
                median = {k: float(np.median([rows[rank][k] for rows, _ in runs])) for k in runs[0][0][rank]}
                worst_s = max(worst_s, median["beyond_spec_s"])
                worst_first_s = max(worst_first_s, median["first_s"])
                print(
                    f"| {ranks} | {rank} | {median['before_clock_s']:.2f} | {median['spec_s']:.2f} | "
                    f"{median['startup_s']:.2f} | {median['wait_s']:.2f} | {median['first_s']:.2f} | "
                    f"{median['beyond_spec_s']:.2f} | "
                    f"{median['worker_spawned_s']:.2f} | {median['worker_warm_s']:.2f} | "
                    f"{median['first_compile_s']:.2f} |"
                )
            print(f"  command (each of {args.repeat} runs, medians shown): {runs[-1][1]}")
    verdict = "PASS" if worst_s <= GOAL_S else "FAIL"
    print(f"slowest rank's start-up beyond the spec: {worst_s:.2f} s (goal at most {GOAL_S:g} s: {verdict})")
    alone_s = spec_alone_s(args.spec, args.repeat)
    print(
        f"the spec alone (a fresh Python, nothing beside it): {alone_s:.2f} s; slowest rank's time to its first "
        f"configuration beyond that: {worst_first_s - alone_s:.2f} s"
    )
    if args.importtime:
        import_breakdown(12, named_lang(args.spec))


if __name__ == "__main__":
    main()
