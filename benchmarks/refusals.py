"""How long mpitune takes to refuse a run that cannot be one, from the process's start to its
exit, and with which exit code (issue 41, classes 1 and 11):

- ``task1_apart``: task 1 of a Slurm job of 2 tasks, started without srun (the job's variables
  only), which refuses before anything is written;
- ``srun_plugin``: a task of a 2-task srun step whose --mpi plugin does not match the library
  (``SLURM_STEP_NUM_TASKS``), each task a world of one rank;
- ``read_only_fresh`` / ``read_only_resume``: a run whose results file is on a file system
  mounted read-only (a tmpfs, mounted by this script in a mount namespace of its own: needs
  root; left out elsewhere, and said so).

Prints one JSON line per case: its name, the median of ``--repeats`` wall seconds, the exit
codes seen and the error line.

    python benchmarks/refusals.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "matmul_c"
_LAUNCH_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "OMPI_COMM_WORLD", "MV2_", "MPI_LOCAL")


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_PREFIXES)}
    return {**env, **variables}


def timed(cmd: list[str], cwd: Path, env: dict[str, str], repeats: int) -> dict[str, object]:
    walls, codes, line = [], set(), ""
    for _ in range(repeats):
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        walls.append(time.monotonic() - started)
        codes.add(proc.returncode)
        line = next((x for x in proc.stderr.splitlines() if x.startswith("mpitune: error:")), line)
    return {"median_s": round(statistics.median(walls), 2), "exit_codes": sorted(codes), "line": line}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mpitune-refusals-"))
    try:
        shutil.copytree(SPEC, work / "matmul_c")
        tune = [sys.executable, "-m", "mpitune", "matmul_c/spec.py", "--out", "run.h5"]
        apart = clean_env(SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_JOB_ID="7")
        step = clean_env(SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="7")
        for name, env in (("task1_apart", apart), ("srun_plugin", step)):
            print(json.dumps({"case": name, **timed(tune, work, env, args.repeats)}), flush=True)
        if os.geteuid() != 0 or not shutil.which("unshare"):
            print(json.dumps({"case": "read_only", "left_out": "needs root and unshare to mount a tmpfs"}))
            return
        prepared = subprocess.run([*tune, "--max-fevals", "2"], cwd=work, env=clean_env(), capture_output=True)
        assert prepared.returncode == 0, prepared.stderr
        for name, out in (("read_only_fresh", "new.h5"), ("read_only_resume", "run.h5")):
            # A private mount namespace: mount a tmpfs, copy the problem in, remount it read-only, run.
            script = (
                f"set -e; mount -t tmpfs tmpfs {work}/ro; cp -r {work}/matmul_c {work}/run.h5 {work}/ro/; "
                f"mount -o remount,ro {work}/ro; cd {work}/ro; "
                f"exec {' '.join(tune[:-1])} {out}"
            )
            (work / "ro").mkdir(exist_ok=True)
            cmd = ["unshare", "-m", "--propagation", "private", "bash", "-c", script]
            print(json.dumps({"case": name, **timed(cmd, work, clean_env(), args.repeats)}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
