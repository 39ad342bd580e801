"""What the kernel cache saves: the same space tuned twice, the second time with another strategy.

For the C matrix multiply (examples/matmul_c) and, where CuPy and a GPU are present, the CUDA one
(examples/matmul_cupy), in a fresh cache folder:

- ``cold``: the spec as it is (brute force), the cache empty;
- ``again``: the second run, with another run-time setting (``--strategy random_sample`` by
  default, ``--second`` to change it), on a new results file, from the cache the first filled;
- ``uncached``: the second run again with ``MPITUNE_KERNEL_CACHE=off``, what it costs today.

For each it prints the process' wall time, the run's own (``report``'s ``wall_s``), the compile
time of all ranks (waited for, and done ahead in the compile workers), the cache entries written
and, for C, gcc's runs (counted by a wrapper given as ``CC``): the compiles made.

    python benchmarks/kernel_cache.py [--ranks 2] [--gpu-ranks 1] [--second "--confirm 10"] [--only c]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {"c": REPO / "examples" / "matmul_c" / "spec.py", "cupy": REPO / "examples" / "matmul_cupy" / "spec.py"}
# A compiler that counts its compiles (not its --version) and hands every call to gcc.
COUNTING_CC = """#!/bin/sh
case " $* " in *" -o "*) echo x >> "{log}";; esac
exec {gcc} "$@"
"""


@dataclass(frozen=True)
class Measured:
    name: str
    wall_s: float  # the mpiexec command, start to exit
    run_wall_s: float  # what the file says the run took
    compile_s: float  # waited for, every rank together
    ahead_s: float  # in the compile workers, every rank together
    written: int  # cache entries written (new or replaced)
    gcc_runs: int | None  # C only


def mpiexec() -> list[str]:
    local = Path(sys.executable).parent / "mpiexec"
    found = os.environ.get("MPITUNE_MPIEXEC") or (str(local) if local.exists() else shutil.which("mpiexec"))
    if not found:
        sys.exit("no mpiexec: install the mpich extra or a system MPI")
    return shlex.split(found)


def entries(folder: Path) -> dict[str, int]:
    """Each entry's name and inode: a rename into place gives a new inode."""
    return {p.name: p.stat().st_ino for p in folder.rglob("*.kernel")} if folder.exists() else {}


def tune(name: str, spec: Path, ranks: int, args: list[str], env: dict[str, str], work: Path) -> Measured:
    out = work / f"{name}.h5"
    folder = Path(env.get("MPITUNE_KERNEL_CACHE", "off"))
    log = work / "compiles.log"
    log.unlink(missing_ok=True)
    before = entries(folder)
    cmd = [*mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", str(spec), "--out", str(out), *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{name}: {shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    after = entries(folder)
    report = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(out), "--json"], capture_output=True, text=True, check=True
    )
    summary = json.loads(report.stdout)
    ranks_rows = summary["per_rank"]
    gcc_runs = len(log.read_text().splitlines()) if log.exists() else (0 if "CC" in env else None)
    return Measured(
        name,
        wall_s,
        float(summary["wall_s"]),
        sum(r["compile_s"] for r in ranks_rows),
        sum(r["compile_ahead_s"] for r in ranks_rows),
        sum(1 for k, inode in after.items() if before.get(k) != inode),
        gcc_runs,
    )


def example(lang: str, ranks: int, second: list[str]) -> list[Measured]:
    with tempfile.TemporaryDirectory(prefix=f"mpitune-kernel-cache-{lang}-") as tmp:
        work = Path(tmp)
        folder = work / "kernels"
        env = dict(os.environ, MPITUNE_KERNEL_CACHE=str(folder))
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if lang == "c":
            gcc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
            cc = work / "cc.sh"
            cc.write_text(COUNTING_CC.format(log=work / "compiles.log", gcc=shlex.quote(gcc)))
            cc.chmod(0o755)
            env["CC"] = str(cc)
        spec = EXAMPLES[lang]
        return [
            tune("cold", spec, ranks, [], env, work),
            tune("again", spec, ranks, second, env, work),
            tune("uncached", spec, ranks, second, dict(env, MPITUNE_KERNEL_CACHE="off"), work),
        ]


def gpu_present() -> bool:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="ranks for the C example (default 2)")
    parser.add_argument("--gpu-ranks", type=int, default=1, help="ranks for the CUDA example (default 1)")
    parser.add_argument("--second", default="--strategy random_sample", help="the second run's settings")
    parser.add_argument("--only", choices=sorted(EXAMPLES), help="one example only")
    args = parser.parse_args()
    second = shlex.split(args.second)
    langs = [args.only] if args.only else list(EXAMPLES)
    print(f"second run: {shlex.join(second)}; cache entries written count the compiles kept (failures are not)")
    print(
        "| example | ranks | run | wall (s) | run's wall (s) | compile (s) | ahead (s) | entries written | gcc runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for lang in langs:
        if lang == "cupy" and not gpu_present():
            print("| cupy | - | skipped: no CuPy or no GPU here | | | | | | |")
            continue
        ranks = args.gpu_ranks if lang == "cupy" else args.ranks
        for m in example(lang, ranks, second):
            runs = "" if m.gcc_runs is None else str(m.gcc_runs)
            print(
                f"| {lang} | {ranks} | {m.name} | {m.wall_s:.1f} | {m.run_wall_s:.1f} | {m.compile_s:.2f} "
                f"| {m.ahead_s:.2f} | {m.written} | {runs} |"
            )
    print(f"rerun: python benchmarks/kernel_cache.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
