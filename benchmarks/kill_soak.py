"""Kill a tuning job with SIGKILL at random moments, check and resume, many times.

    python benchmarks/kill_soak.py [--kills 20] [--ranks 3] [--seed 1]

Each round starts (or resumes) a brute-force run of a small C problem under mpiexec, kills
mpiexec and every rank at a random moment, runs ``python -m mpitune check`` (which must find
the file sound after repairing it) and checks that nothing recorded was lost and nothing
recorded twice. After the kills, one last run completes the space; every configuration must
then be recorded exactly once. Prints one line per round and the tally.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

KERNEL = r"""
#include <time.h>
void work(float *y, const float *x, int n)
{
    struct timespec t = {0, 2000000L * (1 + VARIANT % 3)};  /* 2 to 6 ms a call */
    nanosleep(&t, 0);
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""
SPEC = """
import numpy as np
x = np.arange(64, dtype=np.float32)
lang = "C"
kernel_name = "work"
kernel_source = "work.c"
arguments = [np.zeros(64, np.float32), x, np.int32(64)]
answer = [2 * x, None, None]
tune_params = {"VARIANT": list(range(SIZE))}
iterations = 3
"""


def env() -> dict:
    """mpitune calms MPICH on an oversubscribed node itself; Open MPI needs leave to run as root."""
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **os.environ}


def recorded(cache: Path) -> list[int]:
    if not cache.exists():
        return []
    with h5py.File(cache, "r", libver="latest", swmr=True) as f:
        return [int(i) for i in f["results"]["config_id"]]


def soak(kills: int, ranks: int, size: int, seed: int, mpiexec: str, workdir: Path) -> int:
    rng = random.Random(seed)
    (workdir / "work.c").write_text(KERNEL)
    (workdir / "spec.py").write_text(SPEC.replace("SIZE", str(size)))
    cache = workdir / "soak.h5"
    cmd = [
        mpiexec,
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "mpitune",
        "spec.py",
        "--cache",
        str(cache),
        "--strategy",
        "brute_force",
    ]
    passed = 0
    for round_ in range(1, kills + 1):
        before = recorded(cache)
        job = subprocess.Popen(
            cmd, cwd=workdir, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        delay_s = rng.uniform(0.2, 3.0)
        time.sleep(delay_s)
        finished_early = job.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        if cache.exists():
            check = subprocess.run(
                [sys.executable, "-m", "mpitune", "check", str(cache)], env=env(), capture_output=True, text=True
            )
        else:  # killed before the file was made: nothing was recorded, so nothing is lost
            check = subprocess.CompletedProcess([], 0, "no file yet", "")
        after = recorded(cache)
        ok = check.returncode == 0 and len(after) == len(set(after)) and set(before) <= set(after)
        passed += ok
        print(
            f"round {round_:2d}: killed after {delay_s:.2f} s{' (it had ended)' if finished_early else ''}, "
            f"{len(before)} -> {len(after)} recorded, check {'sound' if check.returncode == 0 else 'FAILED'}"
            f"{'' if ok else ' <- FAILED: ' + check.stdout.strip().replace(chr(10), ' | ')}",
            flush=True,
        )
    final = subprocess.run(cmd, cwd=workdir, env=env(), capture_output=True, text=True)
    ids = recorded(cache)
    complete = final.returncode == 0 and sorted(ids) == list(range(size))
    print(
        f"final run: exit {final.returncode}, {len(ids)} rows for {size} configurations, "
        f"{'each recorded exactly once' if complete else 'NOT each exactly once'}"
    )
    print(f"{passed} of {kills} kills passed the check; the final file is {'complete' if complete else 'WRONG'}")
    return 0 if passed == kills and complete else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--size", type=int, default=1000, help="configurations in the space")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--mpiexec",
        default=str(Path(sys.executable).parent / "mpiexec")
        if (Path(sys.executable).parent / "mpiexec").exists()
        else shutil.which("mpiexec"),
    )
    args = p.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    with tempfile.TemporaryDirectory() as tmp:
        return soak(args.kills, args.ranks, args.size, args.seed, args.mpiexec, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
