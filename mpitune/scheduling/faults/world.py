"""Processes started as several tasks that MPI does not see as one job. Each is a world of one rank
and tunes the whole space; all but one then fail on the file, for a cause ("another mpitune run is
writing") that is not the real one.

MPI cannot tell, but the launcher's variables give the world it meant (``PMI_SIZE``,
``OMPI_COMM_WORLD_SIZE``), and Slurm's give the step's or the job's tasks. In a world of one:

- A launcher that meant one rank (``mpirun -n 1``) is what was asked.
- An srun step of several tasks, or a launcher that meant several, does not belong to the
  library: every task refuses, the first says why.
- No step, and a job of several tasks: a task other than 0 refuses before anything is
  written. Task 0 (a batch script running ``python -m mpitune``) tunes, warning that the other
  GPUs sit idle.

A world of several ranks is never refused: ``mpirun -n 2`` in 8 tasks is the user's choice. Pure:
the environment and the world's size in, a verdict out (comm.py asks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# What each launcher says of the world it started: its size, then this process's rank in it.
_LAUNCHERS = (
    ("PMI_SIZE", "PMI_RANK"),  # MPICH's Hydra (mpiexec, mpirun), Intel MPI, srun --mpi=pmi2
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),  # Open MPI's mpirun
    ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"),  # MVAPICH's mpirun_rsh
)
_HOW = (
    "start the tasks as one MPI job: srun --mpi=pmix (Open MPI) or --mpi=pmi2 (MPICH; srun --mpi=list "
    "shows the site's), or mpirun inside the allocation (python -m mpitune job SPEC does so)"
)


@dataclass(frozen=True)
class WorldError:
    """Why this process cannot be a rank of a tuning job. Of the processes refused together, the one
    numbered ``task`` 0 says ``line``; the others end without a word."""

    line: str
    task: int


@dataclass(frozen=True)
class WorldCheck:
    """The verdict on this process's world: refused (``error``), allowed with a ``warning``, or
    neither."""

    error: WorldError | None = None
    warning: str | None = None


def _count(env: Mapping[str, str], name: str) -> int | None:
    """The whole number ``name`` holds, None where it is unset or holds anything else."""
    text = env.get(name, "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def check_world(size: int, env: Mapping[str, str], library: str) -> WorldCheck:
    """Whether a world of ``size`` ranks is the job its launcher started (the module's docstring
    says how). ``library``: the MPI library's name, for the line that says it does not match."""
    if size > 1:
        return WorldCheck()
    meant = next(((s, r) for s, r in _LAUNCHERS if (_count(env, s) or 0) > 0), None)
    if meant is not None and _count(env, meant[0]) == 1:
        return WorldCheck()
    step = _count(env, "SLURM_STEP_NUM_TASKS") or 0
    procid = _count(env, "SLURM_PROCID") or 0
    if step > 1:
        return WorldCheck(
            WorldError(
                f"srun started {step} tasks but MPI sees a world of 1 rank in each: srun's --mpi plugin "
                f"does not match the MPI library ({library}); use --mpi=pmix for Open MPI, --mpi=pmi2 for "
                f"MPICH (srun --mpi=list shows the site's), or mpirun inside the allocation",
                procid,
            )
        )
    if meant is not None:
        size_name, rank_name = meant
        return WorldCheck(
            WorldError(
                f"the launcher started {_count(env, size_name)} processes ({size_name}) but MPI sees a world of "
                f"1 rank in each: that launcher does not belong to the MPI library ({library}); start the job "
                f"with the mpiexec or mpirun of that library",
                _count(env, rank_name) or 0,
            )
        )
    tasks = _count(env, "SLURM_NTASKS") or 0
    if tasks <= 1:
        return WorldCheck()
    job = env.get("SLURM_JOB_ID", "").strip() or "?"
    if procid > 0:
        return WorldCheck(
            WorldError(
                f"this is task {procid} of Slurm job {job}'s {tasks} tasks but MPI sees it alone (a world of "
                f"1 rank): its tasks were not started as one MPI job, so each would tune everything by itself, into "
                f"the same file; {_HOW}",
                0,
            )
        )
    return WorldCheck(
        warning=f"Slurm job {job} has {tasks} tasks but this run is a world of 1 rank: the GPUs of the other "
        f"{tasks - 1} task(s) sit idle; to tune on all of them, {_HOW}"
    )
