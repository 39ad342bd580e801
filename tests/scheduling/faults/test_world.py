"""faults/world.py: which worlds of one rank are the job their launcher meant, from the
variables Slurm and the launchers set (the real processes are tests/reliability/test_unseen_tasks.py)."""

from __future__ import annotations

import pytest

from mpitune.scheduling.faults.world import WorldError, check_world

LIBRARY = "MPICH Version: 4.2"


@pytest.mark.parametrize(
    "size, env",
    [
        (4, {"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}),  # a world of several: never
        (1, {}),  # no launcher, no Slurm
        (1, {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_JOB_ID": "3"}),  # a job of one task
        (1, {"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "OMPI_COMM_WORLD_SIZE": "1"}),  # mpirun -n 1 in a job of 8
        (1, {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "PMI_SIZE": "1", "PMI_RANK": "0"}),  # Hydra over srun
        (1, {"SLURM_NTASKS": "two", "SLURM_PROCID": "1"}),  # not a count: nothing to say
    ],
)
def test_what_the_launcher_meant_passes_in_silence(size, env):
    check = check_world(size, env, LIBRARY)
    assert check.error is None and check.warning is None


def test_a_task_other_than_0_without_a_step_is_refused_and_says_so():
    check = check_world(1, {"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_JOB_ID": "77"}, LIBRARY)
    assert isinstance(check.error, WorldError) and check.error.task == 0  # alone in its refusal: it speaks
    assert "task 2 of Slurm job 77's 4 tasks" in check.error.line and "srun --mpi=list" in check.error.line


def test_task_0_without_a_step_is_warned_that_the_other_gpus_sit_idle():
    check = check_world(1, {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "77"}, LIBRARY)  # salloc's shell: no SLURM_PROCID
    assert check.error is None and check.warning is not None
    assert "the GPUs of the other 3 task(s) sit idle" in check.warning


def test_an_srun_step_of_worlds_of_one_is_refused_and_task_0_speaks():
    for task in (0, 1, 2):
        env = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_NTASKS": "3", "SLURM_PROCID": str(task), "PMI_SIZE": "3"}
        error = check_world(1, env, LIBRARY).error
        assert error is not None and error.task == task
        assert "srun started 3 tasks" in error.line and LIBRARY in error.line and "--mpi=pmi2" in error.line


def test_a_launcher_that_meant_several_ranks_is_refused_naming_its_variable():
    error = check_world(1, {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3"}, LIBRARY).error
    assert error is not None and error.task == 3
    assert "started 4 processes (OMPI_COMM_WORLD_SIZE)" in error.line and LIBRARY in error.line
