#!/bin/bash
# Tune one spec on DAS-6 GPU nodes: one MPI rank per GPU, stopped cleanly before the job's
# time limit and requeued so that the next job resumes where this one stopped.
#
#   sbatch jobscripts/das6.sh SPEC [mpitune flags]
#   sbatch -N 2 -C A6000 jobscripts/das6.sh spec.py --strategy random_sample
#
# The #SBATCH lines are defaults; flags given to sbatch override them.
#SBATCH --job-name=mpitune
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1   # one rank per GPU: keep equal to the count in --gres=gpu:N
#SBATCH --gres=gpu:1          # GPUs per node
#SBATCH --cpus-per-task=16    # cores per rank, for its compile workers (at most the node's cores / GPUs)
#SBATCH -C A4000              # GPU type (DAS-6 nodes also carry e.g. A6000, A100)
#SBATCH --time=00:15:00       # the limit for jobs during working hours on DAS-6
#SBATCH --signal=B:USR1@90    # warn 90 s before the limit (Slurm may send it up to a minute early)
#SBATCH --requeue             # let the job requeue itself when it stopped early
#SBATCH --output=mpitune-%j.out
#
# Knobs, as environment variables:
#   MPITUNE_ENV       virtual environment or conda prefix to activate (default: ./.venv if present)
#   MPITUNE_MODULES   modules to load (default: "prun"; add your MPI module); skipped without `module`
#   MPITUNE_LAUNCHER  srun (default) or mpirun (inside this allocation)
#   MPITUNE_SRUN_MPI  srun's --mpi plugin (default: pmix for Open MPI, pmi2 for MPICH)
#   MPITUNE_REQUEUE   1 (default) to requeue after an early, resumable stop; 0 not to
#   MPITUNE_MARGIN_S  also stop by --time-limit this many seconds before the job's end
set -eo pipefail

# DAS-6: Slurm comes with prun; add the MPI module your mpi4py was built against.
if type module >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    module load ${MPITUNE_MODULES:-prun}
fi

env_dir=${MPITUNE_ENV:-$PWD/.venv}
if [ -f "$env_dir/bin/activate" ]; then
    # shellcheck disable=SC1091
    source "$env_dir/bin/activate"
elif [ -n "${MPITUNE_ENV:-}" ] && command -v conda >/dev/null 2>&1; then
    eval "$(conda shell.bash hook)" && conda activate "$MPITUNE_ENV"
fi

exec python3 -m mpitune job "$@"
