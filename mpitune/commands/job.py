"""``job SPEC [flags]``: run one tuning job inside a Slurm allocation (what the job scripts call).

It starts one rank per task with srun (or mpirun), turns Slurm's warning before the time
limit (``--signal=B:USR1@T``) or its SIGTERM into a clean stop (rank 0 sees the stop file
before the next batch, the batch in flight finishes, results are flushed, every rank exits
with 75), and then requeues the job so that the next one resumes. A SIGTERM while much of
the job's time is left is no time limit but ``scancel`` (or an administrator): the run drains
the same way, within Slurm's KillWait if the batch in flight allows, and the job is not
requeued, since a cancelled job is meant to end. Keeping this in Python, not in each site's
job script, leaves the scripts to the site-specific lines only.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from mpitune.errors import UserError
from mpitune.exits import ExitCode

# srun ends the remaining tasks this long after the first one ended, whatever its exit code:
# a killed rank must not leave the others waiting forever in a collective, and a clean stop
# must leave rank 0 time to close the file after the workers have exited 75. (srun's
# --kill-on-bad-exit does the first but breaks the second: it counts the workers' 75 as a
# failure and killed rank 0 as it closed the file, seen on three nodes.)
SRUN_WAIT_S = 5.0
HELP = "run SPEC on the tasks of this Slurm job, stop cleanly before its limit and requeue"
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--launcher",
        choices=("srun", "mpirun"),
        default=os.environ.get("MPITUNE_LAUNCHER", "srun"),
        help="how to start the ranks (default: srun, or $MPITUNE_LAUNCHER)",
    )
    p.add_argument(
        "--srun-mpi",
        default=os.environ.get("MPITUNE_SRUN_MPI"),
        help="srun's --mpi plugin (default: pmix for Open MPI, pmi2 for MPICH)",
    )
    p.add_argument(
        "--srun-wait",
        type=float,
        default=float(os.environ.get("MPITUNE_SRUN_WAIT_S", SRUN_WAIT_S)),
        metavar="S",
        help=f"srun ends the other tasks S s after the first one ended (default: {SRUN_WAIT_S:g}, "
        "or $MPITUNE_SRUN_WAIT_S)",
    )
    p.add_argument(
        "--requeue",
        default=os.environ.get("MPITUNE_REQUEUE", "1") == "1",
        action=argparse.BooleanOptionalAction,
        help="requeue the job when the run stopped early and can resume (default: yes)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=os.environ.get("MPITUNE_MARGIN_S"),
        metavar="S",
        help="also stop by --time-limit, S seconds before the job's end",
    )
    p.add_argument("mpitune_args", nargs=argparse.REMAINDER, help="SPEC and mpitune flags")


def srun_mpi_plugin(python: str) -> str:
    """The plugin matching the MPI library mpi4py loads; a mismatch gives worlds of 1 rank."""
    probe = subprocess.run(
        [python, "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return "pmix" if "Open MPI" in probe.stdout else "pmi2"


def seconds_left(squeue_time: str) -> int | None:
    """Parse squeue's %L: [days-][hours:]minutes:seconds; None for a job without a limit
    (``UNLIMITED``, ``NOT_SET``) or anything else that is not a time."""
    days, _, clock = squeue_time.strip().rpartition("-")
    if (days and not days.isdigit()) or not all(p.isdigit() for p in clock.split(":")):
        return None
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, secs = parts
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + secs


# A SIGTERM with more time left than this is not the time limit's (Slurm sends that at the
# limit, with none left; a --signal=B:TERM@T warning comes at most T + 60 s early).
CANCELLED_ABOVE_S = 300


def time_left_s(job_id: str) -> int | None:
    """Seconds until the job's limit, from squeue's %L; None where squeue cannot say or the
    job has no limit."""
    try:
        squeue = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return seconds_left(squeue.stdout) if squeue.returncode == 0 else None


def stop_cause(signum: int, left_s: int | None) -> str:
    """Why the job is asked to stop: "limit" for the warning (SIGUSR1, only ever sent on
    request with --signal) and for a SIGTERM near the job's end; "cancelled" for a SIGTERM
    with the time left well above any warning (scancel), or in a job without a limit."""
    if signum == signal.SIGUSR1:
        return "limit"
    if left_s is None or left_s > CANCELLED_ABOVE_S:
        return "cancelled"
    return "limit"


def run(args: argparse.Namespace) -> int:
    if not args.mpitune_args:
        raise UserError("job needs a spec: python -m mpitune job SPEC [mpitune flags]")
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not job_id:
        raise UserError(
            "job runs inside a Slurm allocation (sbatch or salloc) and SLURM_JOB_ID is not set; "
            "outside Slurm run: mpiexec -n RANKS python -m mpitune SPEC"
        )
    python = sys.executable
    if args.launcher == "srun":
        start = [
            "srun",
            f"--mpi={args.srun_mpi or srun_mpi_plugin(python)}",
            "--kill-on-bad-exit=0",
            f"--wait={args.srun_wait:g}",
        ]
    else:
        start = ["mpirun", "-n", os.environ.get("SLURM_NTASKS", "1")]
    stop_file = Path.cwd() / f".mpitune-stop-{job_id}"
    stop_file.unlink(missing_ok=True)
    extra = ["--stop-file", str(stop_file)]
    if args.margin is not None:
        left = time_left_s(job_id)
        if left is not None and left - float(args.margin) > 0:
            extra += ["--time-limit", str(left - float(args.margin))]
    causes: list[str] = []

    def ask_to_stop(signum, frame):
        stop_file.touch()  # first: rank 0 looks for it before every batch
        if causes:
            return  # scancel signals every process of the job: say it once
        cause = stop_cause(signum, None if signum == signal.SIGUSR1 else time_left_s(job_id))
        causes.append(cause)
        name = signal.Signals(signum).name
        if cause == "cancelled":
            print(
                f"mpitune job: {name}: the job was cancelled (not its time limit), asking the run to "
                "stop; it will not be requeued",
                flush=True,
            )
        else:
            print(f"mpitune job: {name}: the time limit is near, asking the run to stop", flush=True)

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, ask_to_stop)
    cmd = [*start, python, "-m", "mpitune", *args.mpitune_args, *extra]
    print(
        f"mpitune job {job_id}: {os.environ.get('SLURM_NTASKS', '1')} rank(s) on "
        f"{os.environ.get('SLURM_JOB_NODELIST', os.uname().nodename)}: {' '.join(cmd)}",
        flush=True,
    )
    try:
        rc = subprocess.run(cmd).returncode
    finally:
        stop_file.unlink(missing_ok=True)
    if rc == ExitCode.RESUMABLE:
        print("mpitune job: stopped early; the results so far are saved and a rerun resumes", flush=True)
        if causes == ["cancelled"]:
            print(f"mpitune job: job {job_id} was cancelled, so not requeued; submit it again to resume", flush=True)
        elif args.requeue:
            requeued = subprocess.run(["scontrol", "requeue", job_id]).returncode == 0
            print(f"mpitune job: {'requeued' if requeued else 'could not requeue'} job {job_id}", flush=True)
    return rc
