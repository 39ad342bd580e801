"""Rank 0 and ``report`` on a search of 10^5 configurations and more: does either slow down, or
grow, with the rows a run has recorded?

    python benchmarks/large_replay.py [--configs 200000] [--ranks 2] [--workdir DIR]

Writes a Kernel Tuner cache of ``--configs`` configurations of a made-up space (six parameters,
times drawn from a seeded generator) into a temporary folder, then, each command printed before
it runs:

1. replays it by brute force on ``--ranks`` ranks under the venv's ``mpiexec``, and prints the
   configurations per second of wall time over each 10,000 rows (from the times at which rank 0's
   progress lines arrive), the whole job's wall time and rank 0's peak resident memory (VmHWM,
   read from /proc while it runs);
2. runs ``python -m mpitune report`` on the replay's results file and prints its wall time and
   peak resident memory (VmHWM), and the file's size.

A throughput that falls from one 10,000 rows to the next means a cost per hand-out that grows
with the run. Run it from the repository root.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

STEP_ROWS = 10_000
_PROGRESS = re.compile(r"batch \d+: (\d+)/\d+ configs")


def mpiexec() -> str:
    """The venv's mpiexec (the MPICH that mpi4py was built against), else the one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec") or "mpiexec"


def write_cache(path: Path, configs: int, seed: int = 1) -> None:
    """A Kernel Tuner 1.5.0 cache of the first ``configs`` configurations of a six-parameter
    space, five launches each, a few failed as Kernel Tuner marks them."""
    params = {
        "block_size_x": [16, 32, 64, 128, 256, 512, 1024, 2048],
        "block_size_y": list(range(1, 11)),
        "tile_x": list(range(1, 11)),
        "tile_y": list(range(1, 11)),
        "unroll": list(range(1, 11)),
        "method": list(range(0, 30)),
    }
    names = list(params)
    rng = np.random.default_rng(seed)
    base_ms = rng.uniform(1.0, 10.0, size=configs)
    noise = rng.normal(1.0, 0.01, size=(configs, 5))
    entries = {}
    for i, values in enumerate(itertools.islice(itertools.product(*params.values()), configs)):
        entry: dict = dict(zip(names, values))
        if i % 97 == 13:
            entry.update(__error__="CompilationFailedConfig", compile_time=20.0)
        else:
            times = [round(float(t), 4) for t in base_ms[i] * noise[i]]
            entry.update(
                time=sum(times) / len(times),
                times=times,
                compile_time=20.0,
                verification_time=0.5,
                benchmark_time=sum(times),
            )
        entries[",".join(map(str, values))] = entry
    if len(entries) < configs:
        sys.exit(f"the made-up space holds {len(entries)} configurations, fewer than {configs}")
    document = {
        "device_name": "Made-up GPU",
        "kernel_name": "made_up",
        "problem_size": [4096, 4096],
        "tune_params_keys": names,
        "tune_params": params,
        "objective": "time",
        "cache": entries,
    }
    path.write_text(json.dumps(document))


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux: /proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def rank0_hwm_kib(pid: int) -> int | None:
    """The peak resident memory so far of the descendant of ``pid`` that is MPI rank 0."""
    for child in descendants(pid):
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            if b"PMI_RANK=0" not in environ or b"python" not in Path(f"/proc/{child}/cmdline").read_bytes():
                continue
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except OSError:
            continue
    return None


def replay(cache: Path, out: Path, ranks: int) -> None:
    command = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", "replay", str(cache)]
    command += ["--strategy", "brute_force", "--out", str(out)]
    print("$ " + shlex.join(command), flush=True)
    started = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak_kib = [0]

    def watch() -> None:
        while job.poll() is None:
            peak_kib[0] = max(peak_kib[0], rank0_hwm_kib(job.pid) or 0)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    marks: list[tuple[int, float]] = []  # (rows done, seconds since start)
    lines = []
    assert job.stdout is not None
    for line in job.stdout:
        lines.append(line)
        found = _PROGRESS.search(line)
        if found:
            marks.append((int(found.group(1)), time.perf_counter() - started))
    code = job.wait()
    wall_s = time.perf_counter() - started
    watcher.join()
    if code != 0:
        sys.exit(f"failed ({code}):\n{''.join(lines[-30:])}")
    print(f"{'rows':>16}  configs/s")
    previous, next_step = (0, marks[0][1] if marks else 0.0), STEP_ROWS
    for done, at_s in marks:
        if done >= next_step or (done, at_s) == marks[-1]:
            rate = (done - previous[0]) / max(at_s - previous[1], 1e-9)
            print(f"{previous[0]:>7,}-{done:<7,}  {rate:9.0f}")
            previous, next_step = (done, at_s), (done // STEP_ROWS + 1) * STEP_ROWS
    first_s = marks[0][1] if marks else 0.0
    print(
        f"replay on {ranks} ranks: {wall_s:.1f} s wall ({first_s:.1f} s to the first hand-out's line), "
        f"rank 0's peak memory {peak_kib[0] / 1024:.0f} MiB"
    )


# ``report`` as the command line runs it, then its peak resident memory (VmHWM: this process's
# own since its exec, where ``ru_maxrss`` would count the fork of this large benchmark process).
_REPORT = (
    "import sys\n"
    "from mpitune.cli import main\n"
    "code = main(['report', sys.argv[1]])\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
    "print(hwm, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def report(out: Path) -> None:
    command = [sys.executable, "-m", "mpitune", "report", str(out)]
    print("$ " + shlex.join(command), flush=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _REPORT, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"report failed: {done.stderr.decode()}")
    peak_kib = int(done.stderr.decode().split()[-1])
    size_mb = out.stat().st_size / 1e6
    print(f"report of {size_mb:.1f} MB: {wall_s:.1f} s wall, peak memory {peak_kib / 1024:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=200_000, help="configurations (default 200,000)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the replay (default 2)")
    parser.add_argument("--workdir", type=Path, help="keep the cache and results here (default: a temporary folder)")
    parser.add_argument("--skip-replay", action="store_true", help="report on --workdir's earlier replay alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="large-replay-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        cache, out = workdir / f"made_up_{args.configs}.json", workdir / f"made_up_{args.configs}.replay.h5"
        if not args.skip_replay:
            started = time.perf_counter()
            write_cache(cache, args.configs)
            print(f"wrote {cache} ({cache.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s")
            out.unlink(missing_ok=True)
            replay(cache, out, args.ranks)
        report(out)


if __name__ == "__main__":
    main()
