"""A stop during the confirmation: how long the job takes to end, and what the next run makes.

    python benchmarks/stop_in_confirmation.py [--ranks 3] [--spin-ms 100] [--after-s 4]

Tunes a C kernel of 8 configurations that each spin ``--spin-ms`` a launch without confirming,
then runs the same command with ``--confirm 8``, sends SIGTERM to every rank (as Slurm does
before a time limit) ``--after-s`` seconds after the confirmation went out, and prints how long
the job took to end, the launches it kept and owed, then what the resumed run timed and how
long it took. Everything happens in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

KERNEL = r"""
#include <time.h>
void spin(float *out, int n)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < SPIN_NSL);
    for (int i = 0; i < n; i++)
        out[i] = 1.0f;
}
"""
SPEC = """
import numpy as np
n = 16
lang = "C"
kernel_name = "spin"
kernel_source = "spin.c"
arguments = [np.zeros(n, np.float32), np.int32(n)]
answer = [np.ones(n, np.float32), None]
tune_params = {"VARIANT": list(range(8))}
iterations = 3
strategy = "brute_force"
"""


def command(ranks: int, *args: str) -> list[str]:
    here = Path(sys.executable).parent
    mpiexec = str(here / "mpiexec") if (here / "mpiexec").exists() else "mpiexec"
    return [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpitune", "spec.py", *args]


def purposes(cache: Path, run: int) -> dict[str, int]:
    with h5py.File(cache, "r") as f:
        rows = f["retimed"][...]
    mine = [p.decode() for p in rows["purpose"][rows["run"] == run]]
    return {p: mine.count(p) for p in sorted(set(mine))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--spin-ms", type=int, default=100)
    parser.add_argument("--after-s", type=float, default=4.0)
    args = parser.parse_args()
    env = dict(os.environ, MPIR_CVAR_CH4_PROGRESS_THROTTLE="1")
    with tempfile.TemporaryDirectory(prefix="mpitune-stop-") as folder:
        where = Path(folder)
        (where / "spin.c").write_text(KERNEL.replace("SPIN_NS", str(args.spin_ms * 1_000_000)))
        (where / "spec.py").write_text(SPEC)
        subprocess.run(command(args.ranks, "--confirm", "0"), cwd=where, env=env, check=True, capture_output=True)
        job = subprocess.Popen(
            command(args.ranks, "--confirm", "8", "-v"),
            cwd=where,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert job.stderr is not None
        for line in job.stderr:
            if re.search(r"confirming \d+ candidates", line):
                print(f"confirmation went out: {line.split(': ', 1)[1].strip()}")
                break
        time.sleep(args.after_s)
        pids = subprocess.run(["pgrep", "-f", "mpitune spec.py"], capture_output=True, text=True).stdout.split()
        signalled = time.monotonic()
        for pid in map(int, pids):
            if pid != job.pid and os.readlink(f"/proc/{pid}/cwd") == str(where):
                os.kill(pid, signal.SIGTERM)
        out, _ = job.communicate(timeout=300)
        ended_s = time.monotonic() - signalled
        print(f"SIGTERM {args.after_s:.1f} s after the confirmation went out: the job ended {ended_s:.2f} s later")
        print(f"exit code {job.returncode}")
        print(f"kept in the file (run 1): {purposes(where / 'spec.h5', 1)}")
        print("".join(line for line in out.splitlines(keepends=True) if "confirm" in line).strip())
        started = time.monotonic()
        again = command(args.ranks, "--confirm", "8")
        resumed = subprocess.run(again, cwd=where, env=env, capture_output=True, text=True)
        print(f"the same command again: {time.monotonic() - started:.1f} s, exit {resumed.returncode}")
        print(f"timed by it (run 2): {purposes(where / 'spec.h5', 2)}")
        print("".join(line for line in resumed.stdout.splitlines(keepends=True) if "best" in line).strip())


if __name__ == "__main__":
    main()
