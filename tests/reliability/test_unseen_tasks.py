"""Issue 41, class 1: tasks that MPI does not see as one job. Processes started as tasks of one
Slurm job (or by a launcher of another MPI library) without MPI seeing them as one world each
tune everything alone, and all but one then failed on the file, "another mpitune run is
writing ...". Now a task other than 0 refuses before anything is written, in one line that
names the real cause and how to start the job; task 0 alone (a batch script that runs mpitune
itself) tunes with a warning that the other tasks' GPUs sit idle; a launcher's world of any
size is left alone. Real processes, with the variables Slurm and the launchers set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import mpi_env, mpiexec, write_scale_spec

from mpitune.exits import ExitCode
from mpitune.store.reader import read

SPACE = '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0]}'
_LAUNCH_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "OMPI_COMM_WORLD", "MV2_", "MPI_LOCAL")


def clean_env(**variables: str) -> dict[str, str]:
    """The tests' environment without any launcher's or Slurm's variables, then ``variables``."""
    env = {k: v for k, v in mpi_env().items() if not k.startswith(_LAUNCH_PREFIXES)}
    return {**env, **variables}


def alone(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``python -m mpitune`` started without a launcher: MPI makes it a world of one rank."""
    return subprocess.Popen(
        [sys.executable, "-m", "mpitune", "spec.py", "--out", "run.h5", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ended(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("mpitune: error:")]


def test_task_1_started_beside_task_0_refuses_naming_the_cause_and_task_0_tunes(tmp_path):
    write_scale_spec(tmp_path, SPACE)
    job = {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    first = alone(tmp_path, clean_env(**job, SLURM_PROCID="0"))
    second = alone(tmp_path, clean_env(**job, SLURM_PROCID="1"))
    rc1, out1, err1 = ended(second)
    rc0, _out0, err0 = ended(first)
    assert rc1 == ExitCode.USER_ERROR, err1
    assert "Traceback" not in err1 and "another mpitune run" not in err1, err1
    (line,) = errors(err1)
    assert "task 1 of Slurm job 7's 2 tasks" in line and "not started as one MPI job" in line, line
    assert "srun --mpi=pmix" in line and "--mpi=pmi2" in line and "mpirun inside the allocation" in line, line
    assert "results in" not in out1
    assert rc0 == 0, err0
    assert "the GPUs of the other 1 task(s) sit idle" in err0, err0
    data = read(str(tmp_path / "run.h5"))
    assert sorted(data.results["config_id"]) == list(range(6))  # all of them, once: task 0 alone wrote
    assert list(data.runs["ranks"]) == [1]


def test_a_task_other_than_0_writes_nothing(tmp_path):
    write_scale_spec(tmp_path, SPACE)
    rc, _out, err = ended(alone(tmp_path, clean_env(SLURM_NTASKS="4", SLURM_PROCID="3", SLURM_JOB_ID="12")))
    assert rc == ExitCode.USER_ERROR, err
    assert len(errors(err)) == 1 and "task 3 of Slurm job 12's 4 tasks" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale.c", "spec.py"]  # no file, no temporary


def test_a_batch_script_running_mpitune_itself_warns_that_the_other_gpus_sit_idle(tmp_path):
    write_scale_spec(tmp_path, SPACE)
    # The batch step: the job's variables, task 0, no srun step.
    env = clean_env(SLURM_NTASKS="4", SLURM_PROCID="0", SLURM_JOB_ID="21", SLURM_NODEID="0", SLURM_LOCALID="0")
    rc, out, err = ended(alone(tmp_path, env))
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if "sit idle" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], err
    assert "Slurm job 21 has 4 tasks" in warnings[0] and "other 3 task(s)" in warnings[0], warnings
    assert "results in" in out


def test_srun_tasks_each_a_world_of_one_all_refuse_and_task_0_says_why(tmp_path):
    write_scale_spec(tmp_path, SPACE)
    step = {"SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "8", "SLURM_STEP_ID": "0"}
    procs = [alone(tmp_path, clean_env(**step, SLURM_PROCID=str(task))) for task in (0, 1)]
    (rc0, _, err0), (rc1, _, err1) = (ended(p) for p in procs)
    assert rc0 == rc1 == ExitCode.USER_ERROR, err0 + err1
    assert len(errors(err0)) == 1 and "srun started 2 tasks but MPI sees a world of 1 rank" in err0, err0
    assert errors(err1) == [] and "Traceback" not in err1, err1
    assert not (tmp_path / "run.h5").exists()


def test_a_launcher_of_another_mpi_library_is_refused(tmp_path):
    write_scale_spec(tmp_path, SPACE)
    # Hydra's variables for rank 0 of 2, which this library's singleton does not read.
    rc, _out, err = ended(alone(tmp_path, clean_env(PMI_SIZE="2", PMI_RANK="0")))
    assert rc == ExitCode.USER_ERROR, err
    (line,) = errors(err)
    assert "started 2 processes (PMI_SIZE)" in line and "does not belong to the MPI library" in line, line
    assert not (tmp_path / "run.h5").exists()


def test_mpirun_inside_an_allocation_of_more_tasks_runs_without_a_word(tmp_path):
    """``mpiexec -n 2`` (and ``-n 1``) inside a job of 8 tasks: the world the launcher meant."""
    write_scale_spec(tmp_path, SPACE)
    env = clean_env(SLURM_NTASKS="8", SLURM_PROCID="0", SLURM_JOB_ID="9")
    for ranks in (2, 1):
        out = tmp_path / f"run{ranks}.h5"
        proc = subprocess.run(
            [*mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpitune", "spec.py", "--out", str(out)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr
        assert "sit idle" not in proc.stderr and "MPI sees" not in proc.stderr, proc.stderr
        assert list(read(str(out)).runs["ranks"]) == [ranks]
