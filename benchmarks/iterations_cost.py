"""What a configuration costs as ``iterations`` grows, with racing on and off (C backend).

    python benchmarks/iterations_cost.py [--ranks 2] [--iterations 1000 10000 100000] [--mpiexec CMD]

Tunes a C kernel of well under a microsecond (8 configurations) by brute force on RANKS ranks,
once per number of iterations and racing setting, and prints per configuration: the statuses,
the median seconds from its start to its end on its rank, the median of its timed launches'
seconds (``benchmark_s``), the median timed launches it got, rank 0's seconds writing the file
per configuration, the file's size, and the peak resident memory of the largest process of the
job (a rank or a measuring worker). Racing's verdict after each launch costs the same however
many launches came before (model/judging/racing.py, ``Standing``), so a configuration's time grows in
proportion to its iterations, racing on or off.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mpitune.store.reader import read

KERNEL = """
void tiny(float *out, const float *in)
{
    for (int i = 0; i < N; i += STEP)
        for (int j = i; j < i + STEP && j < N; j++)
            out[j] = in[j] * 2.0f;
}
"""

SPEC = """
import numpy as np

n = 64
x = np.arange(n, dtype=np.float32)
lang = "C"
kernel_name = "tiny"
kernel_source = "tiny.c"
arguments = [np.zeros(n, dtype=np.float32), x]
answer = [2 * x, None]
compiler_options = [f"-DN={{n}}"]
tune_params = {{"STEP": [1, 2, 3, 4, 5, 6, 7, 8]}}
iterations = {iterations}
racing = {racing}
strategy = "brute_force"
"""

# Runs the job and prints the largest resident memory of any process it waited for, in KiB
# (Linux's ru_maxrss): the ranks, and through them their workers.
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)\n"
    "sys.exit(code)\n"
)


def measure(directory: Path, iterations: int, racing: bool, ranks: int, mpiexec: str) -> str:
    (directory / "tiny.c").write_text(KERNEL)
    spec = directory / "spec.py"
    spec.write_text(SPEC.format(iterations=iterations, racing=racing))
    cache = directory / f"it{iterations}-{'on' if racing else 'off'}.h5"
    job = [*shlex.split(mpiexec), "-n", str(ranks), sys.executable, "-m", "mpitune", str(spec)]
    job += ["--out", str(cache), "--confirm", "0", "--no-calibrate"]
    done = subprocess.run([sys.executable, "-c", PEAK, *job], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        why = done.stderr.strip()[-300:]
        return f"{iterations:>9,} {'on' if racing else 'off':>6}  failed ({done.returncode}): {why}"
    peak_mib = int(done.stdout.strip().splitlines()[-1]) / 1024
    data = read(str(cache))
    rows = data.results
    statuses = ", ".join(f"{s} {n}" for s, n in zip(*np.unique(rows["status"], return_counts=True)))
    config_s = float(np.median(rows["finished_s"] - rows["started_s"]))
    benchmark_s = float(np.median(rows["benchmark_s"]))
    launches = int(np.median(rows["launches"]))
    writes = data.timeline[data.timeline["phase"] == "write"]
    write_s = float(np.sum(writes["end_s"] - writes["start_s"])) / len(rows)
    size_mib = os.path.getsize(cache) / 2**20
    return (
        f"{iterations:>9,} {'on' if racing else 'off':>6}  {statuses:<10} {config_s:>10.3f} {benchmark_s:>12.3f}"
        f" {launches:>9,} {write_s:>9.3f} {size_mib:>8.1f} {peak_mib:>9.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--iterations", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--mpiexec", default=str(Path(sys.executable).parent / "mpiexec"))
    args = parser.parse_args()
    print(f"C kernel of 8 configurations, brute force on {args.ranks} ranks, no confirmation or calibration")
    print(
        f"{'iterations':>9} {'racing':>6}  {'statuses':<10} {'config s':>10} {'benchmark s':>12}"
        f" {'launches':>9} {'write s':>9} {'file MiB':>8} {'peak MiB':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for iterations in args.iterations:
            for racing in (True, False):
                print(measure(Path(tmp), iterations, racing, args.ranks, args.mpiexec), flush=True)


if __name__ == "__main__":
    main()
