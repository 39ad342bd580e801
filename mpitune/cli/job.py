"""``job SPEC [flags]``: run one tuning job inside a Slurm allocation (what the job scripts call).

It starts one rank per task with srun (or mpirun). Slurm's warning before the time limit
(``--signal=B:USR1@T``) or its SIGTERM becomes a clean stop. Rank 0 sees the stop file before
the next batch. The batch in flight finishes, results are flushed, and every rank exits with 75.
Then the job is requeued, so that the next one resumes.

A SIGTERM while much of the job's time is left is no time limit. It comes from ``scancel``
or an administrator. The run drains the same way, within Slurm's KillWait if the batch in
flight allows. The job is not requeued, since a cancelled job is meant to end.

Keeping this in Python, not in each site's job script, leaves the scripts to the site-specific
lines only.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mpitune.errors import UserError, environment_number, number_flag
from mpitune.exits import ExitCode

# srun ends the remaining tasks this long after the first one ended, whatever its exit code:
# a killed rank must not leave the others waiting forever in a collective, and a clean stop
# must leave rank 0 time to close the file after the workers have exited 75. (srun's
# --kill-on-bad-exit does the first but breaks the second: it counts the workers' 75 as a
# failure and killed rank 0 as it closed the file, seen on three nodes.)
SRUN_WAIT_S = 5.0
LAUNCHERS = ("srun", "mpirun")
HELP = "run SPEC on the tasks of this Slurm job, stop cleanly before its limit and requeue"
log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    # The defaults from the environment are read when the job runs (``settings``), not here:
    # ``job --help`` must work whatever they hold, and a bad one is refused naming the variable.
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="how to start the ranks (default: srun, or $MPITUNE_LAUNCHER)",
    )
    p.add_argument(
        "--srun-mpi",
        default=os.environ.get("MPITUNE_SRUN_MPI"),
        help="srun's --mpi plugin (default: pmix for Open MPI, pmi2 for MPICH)",
    )
    p.add_argument(
        "--srun-wait",
        type=number_flag(zero_ok=True),
        metavar="S",
        help=f"srun ends the other tasks S s after the first one ended (default: {SRUN_WAIT_S:g}, "
        "or $MPITUNE_SRUN_WAIT_S; 0: srun waits for them without limit)",
    )
    p.add_argument(
        "--requeue",
        default=None,
        action=argparse.BooleanOptionalAction,
        help="requeue the job when the run stopped early and can resume (default: yes, or $MPITUNE_REQUEUE, 1 or 0)",
    )
    p.add_argument(
        "--margin",
        type=number_flag(zero_ok=True),
        metavar="S",
        help="also stop by --time-limit, S seconds before the job's end (default: $MPITUNE_MARGIN_S, else none); "
        "a warning says so when the job's end is unknown",
    )
    p.add_argument("mpitune_args", nargs=argparse.REMAINDER, help="SPEC and mpitune flags")


@dataclass(frozen=True)
class JobSettings:
    """The job's settings: a flag, else its environment variable, else the default."""

    launcher: str
    srun_wait_s: float
    requeue: bool
    margin_s: float | None
    job_id: str
    ntasks: str
    het_size: int = 1  # the components of a heterogeneous job (sbatch ... : ...), one world over all


def settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> JobSettings:
    """Every setting, checked before anything starts.

    A bad environment variable is refused in one line naming it. So is a Slurm variable that
    no allocation would hold."""
    env = os.environ if environ is None else environ
    launcher = args.launcher or env.get("MPITUNE_LAUNCHER", "").strip() or "srun"
    if launcher not in LAUNCHERS:
        raise UserError(
            f"environment variable MPITUNE_LAUNCHER: must be one of {', '.join(LAUNCHERS)}, got {launcher!r}"
        )
    requeue = args.requeue
    if requeue is None:
        text = env.get("MPITUNE_REQUEUE", "").strip() or "1"
        if text not in ("0", "1"):
            raise UserError(f"environment variable MPITUNE_REQUEUE: must be 1 (requeue) or 0 (do not), got {text!r}")
        requeue = text == "1"
    wait_s = args.srun_wait
    if wait_s is None:
        wait_s = environment_number("MPITUNE_SRUN_WAIT_S", SRUN_WAIT_S, zero_ok=True, environ=env)
    margin_s = args.margin
    if margin_s is None and env.get("MPITUNE_MARGIN_S", "").strip():
        margin_s = environment_number("MPITUNE_MARGIN_S", 0.0, zero_ok=True, environ=env)
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        raise UserError(
            "job runs inside a Slurm allocation (sbatch or salloc) and SLURM_JOB_ID is not set; "
            "outside Slurm run: mpiexec -n RANKS python -m mpitune SPEC"
        )
    for variable in ("SLURM_NTASKS", "SLURM_CPUS_PER_TASK"):  # set where the allocation asked for them
        if env.get(variable, "").strip():  # the ranks read SLURM_CPUS_PER_TASK for their compile workers
            _slurm_count(env, variable)
    ntasks = env.get("SLURM_NTASKS", "").strip() or "1"
    het_size = int(_slurm_count(env, "SLURM_HET_SIZE")) if env.get("SLURM_HET_SIZE", "").strip() else 1
    if het_size > 1 and launcher != "srun":
        raise UserError(
            f"this is a heterogeneous job of {het_size} components, which only srun starts as one MPI job; "
            "unset MPITUNE_LAUNCHER or set it to srun"
        )
    job_id = _slurm_count(env, "SLURM_JOB_ID")
    if het_size > 1:  # the tasks of every component; SLURM_NTASKS is the first one's
        groups = [env.get(f"SLURM_NTASKS_HET_GROUP_{k}", "").strip() or "1" for k in range(het_size)]
        ntasks = str(sum(int(t) for t in groups if t.isdigit()))
    return JobSettings(launcher, wait_s, requeue, margin_s, job_id, str(int(ntasks)), het_size)


def _slurm_count(env: Mapping[str, str], variable: str) -> str:
    """A Slurm variable that holds a count or an id: a whole number above 0, else refused.

    It is passed on to mpirun, squeue and file names. They would carry 0, -1 or garbage further."""
    text = env.get(variable, "").strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise UserError(f"environment variable {variable}: must be a whole number above 0, got {text!r}")
    return str(int(text))


def _nodes(het_size: int) -> str:
    """The job's nodes, as Slurm lists them: each component's, joined by " + "."""
    if het_size == 1:
        return os.environ.get("SLURM_JOB_NODELIST", os.uname().nodename)
    return " + ".join(os.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{k}", "?") for k in range(het_size))


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
    """Parse squeue's %L: [days-][hours:]minutes:seconds.

    None for a job without a limit (``UNLIMITED``, ``NOT_SET``) or for anything not a time."""
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


def squeue_left(job_id: str) -> str | None:
    """squeue's %L for the job (its time left, or ``UNLIMITED``); None where squeue cannot say."""
    try:
        squeue = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return squeue.stdout.strip() if squeue.returncode == 0 and squeue.stdout.strip() else None


def time_left_s(job_id: str) -> int | None:
    """Seconds until the job's limit, from squeue's %L.

    None where squeue cannot say or the job has no limit."""
    text = squeue_left(job_id)
    return None if text is None else seconds_left(text)


def margin_limit(job_id: str, margin_s: float) -> list[str]:
    """The ``--time-limit`` flags that stop the run ``margin_s`` before the job's end. The end may be
    unknown: squeue cannot answer, or the job has no limit. Or it may be nearer than the margin.
    Then no limit is set and a warning says why. The run still stops cleanly when Slurm signals.
    So the job goes on rather than fail for a margin it cannot apply."""
    text = squeue_left(job_id)
    left_s = None if text is None else seconds_left(text)
    if left_s is not None and left_s > margin_s:
        return ["--time-limit", f"{left_s - margin_s:.10g}"]
    if text is None:
        why = "squeue could not tell the job's time left, so its end time is unknown"
    elif left_s is None:
        why = f"the job has no time limit (squeue: {text})"
    else:
        why = f"the job has only {left_s} s left"
    log.warning("--margin %g s cannot be applied: %s; the run stops only when Slurm signals the limit", margin_s, why)
    return []


def stop_cause(signum: int, left_s: int | None) -> str:
    """Why the job is asked to stop.

    "limit" is for the warning (SIGUSR1, only sent on request with --signal). It is also for a
    SIGTERM near the job's end. "cancelled" is for a SIGTERM with time left well above any warning
    (scancel). It is also for a SIGTERM in a job without a limit."""
    if signum == signal.SIGUSR1:
        return "limit"
    if left_s is None or left_s > CANCELLED_ABOVE_S:
        return "cancelled"
    return "limit"


def run(args: argparse.Namespace) -> int:
    if not args.mpitune_args:
        raise UserError("job needs a spec: python -m mpitune job SPEC [mpitune flags]")
    job = settings(args)
    job_id = job.job_id
    python = sys.executable
    if job.launcher == "srun":
        start = [
            "srun",
            f"--mpi={args.srun_mpi or srun_mpi_plugin(python)}",
            "--kill-on-bad-exit=0",
            f"--wait={math.ceil(job.srun_wait_s)}",  # srun takes whole seconds
        ]
        if job.het_size > 1:  # srun starts the first component alone unless told every one
            start.append(f"--het-group=0-{job.het_size - 1}")
    else:
        start = ["mpirun", "-n", job.ntasks]
    stop_file = Path.cwd() / f".mpitune-stop-{job_id}"
    stop_file.unlink(missing_ok=True)
    extra = ["--stop-file", str(stop_file)]
    if job.margin_s is not None:
        extra += margin_limit(job_id, job.margin_s)
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
    print(f"mpitune job {job_id}: {job.ntasks} rank(s) on {_nodes(job.het_size)}: {' '.join(cmd)}", flush=True)
    try:
        rc = subprocess.run(cmd).returncode
    finally:
        stop_file.unlink(missing_ok=True)
    if rc == ExitCode.RESUMABLE:
        print("mpitune job: stopped early; the results so far are saved and a rerun resumes", flush=True)
        if causes == ["cancelled"]:
            print(f"mpitune job: job {job_id} was cancelled, so not requeued; submit it again to resume", flush=True)
        elif job.requeue:
            requeued = subprocess.run(["scontrol", "requeue", job_id]).returncode == 0
            print(f"mpitune job: {'requeued' if requeued else 'could not requeue'} job {job_id}", flush=True)
    return rc
