"""Starting an MPI job of ``python -m mpitune`` from a Python process that is not one.

That is what ``mpitune.tune_kernel(..., ranks=N)`` does for N > 1.

The job is an ``mpiexec`` of the same MPI library as this Python's mpi4py. That is the venv's
``bin/mpiexec``, which the ``mpich`` wheel installs, else the one on PATH. ``MPITUNE_MPIEXEC``
overrides it and may add options, e.g. ``mpirun --bind-to none``. A separate job works the same
with MPICH and Open MPI, under Slurm too; ``MPI.COMM_SELF.Spawn`` would not. It also leaves the
calling process free of MPI. The job's progress lines reach the caller's stdout as they come.

A caller that is itself a rank of a job (a script run by mpiexec or srun) is not supported.
The launcher's variables in its environment would confuse the new job's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from mpitune.errors import UserError

# The prefix of the line by which a rank says why it stopped (cli/, session.refuse, faults/).
ERROR_PREFIX = "mpitune: error: "


@dataclass(frozen=True)
class JobEnd:
    """How the job ended: its exit code, and the error lines it wrote (without their prefix)."""

    exit_code: int
    errors: list[str]
    stderr_tail: str


def mpiexec() -> list[str]:
    """The command that starts a job with this Python's MPI library."""
    override = os.environ.get("MPITUNE_MPIEXEC", "")
    if override.strip():
        try:
            return shlex.split(override)
        except ValueError as exc:  # an unclosed quote
            raise UserError(f"environment variable MPITUNE_MPIEXEC: {exc}, got {override!r}") from None
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if not found:
        raise UserError(
            "ranks > 1 needs mpiexec: install mpitune with the 'mpich' extra, put the MPI library's "
            "mpiexec on PATH, or name it in MPITUNE_MPIEXEC"
        )
    return [found]


def job_environment(pythonpath: str) -> dict[str, str]:
    """This process' environment, with ``pythonpath`` first so that the ranks import this mpitune."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    return env


def run_mpitune(ranks: int, args: Sequence[str], cwd: str, pythonpath: str, progress: Callable[[str], None]) -> JobEnd:
    """``mpiexec -n RANKS python -m mpitune ARGS``, returning its error lines.

    Each line of its stdout goes to ``progress`` as it comes. Its stderr goes to this process'
    stderr, but for the error lines.
    """
    command = [*mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", *args]
    try:
        job = subprocess.Popen(
            command,
            cwd=cwd,
            env=job_environment(pythonpath),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
    except OSError as exc:
        raise UserError(f"cannot start {shlex.join(command[:1])}: {exc}") from None
    errors: list[str] = []
    tail: list[str] = []
    reader = threading.Thread(target=_relay_stderr, args=(job.stderr, errors, tail), daemon=True)
    reader.start()
    try:
        assert job.stdout is not None
        for line in job.stdout:
            progress(line.rstrip("\n"))
        exit_code = job.wait()
    except BaseException:  # interrupted (Ctrl-C in a notebook): the job must not outlive the call
        job.terminate()
        job.wait()
        raise
    finally:
        reader.join()
    return JobEnd(exit_code, errors, "".join(tail[-20:]))


def _relay_stderr(stream: IO[str] | None, errors: list[str], tail: list[str]) -> None:
    assert stream is not None
    for line in stream:
        tail.append(line)
        if line.startswith(ERROR_PREFIX):
            errors.append(line[len(ERROR_PREFIX) :].rstrip("\n"))
        else:
            sys.stderr.write(line)
            sys.stderr.flush()
