#!/bin/bash
# Tune one spec on any Slurm cluster: one MPI rank per GPU, stopped cleanly before the job's
# time limit and requeued so that the next job resumes. Lines marked SITE are the ones to
# adapt; jobscripts/das6.sh is this script filled in for DAS-6.
#
#   sbatch jobscripts/slurm.sh SPEC [mpitune flags]
#
#SBATCH --job-name=mpitune
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4   # SITE: GPUs per node (one rank each)
#SBATCH --gres=gpu:4          # SITE: the same count, in your cluster's gres syntax
#SBATCH --cpus-per-task=8     # SITE: cores per rank for its compile workers (the node's cores / GPUs)
##SBATCH --partition=gpu      # SITE: the partition with GPU nodes, if not the default
##SBATCH --constraint=...     # SITE: a GPU type feature, if your cluster has them
#SBATCH --time=01:00:00       # SITE: your job length
#SBATCH --signal=B:USR1@120   # warn 120 s before the limit: longer than one batch takes
#SBATCH --requeue
#SBATCH --output=mpitune-%j.out
#
# Knobs: see jobscripts/das6.sh (MPITUNE_ENV, MPITUNE_MODULES, MPITUNE_LAUNCHER,
# MPITUNE_SRUN_MPI, MPITUNE_REQUEUE, MPITUNE_MARGIN_S).
set -eo pipefail

if type module >/dev/null 2>&1 && [ -n "${MPITUNE_MODULES:-}" ]; then
    # SITE: e.g. MPITUNE_MODULES="cuda/12.4 openmpi/4.1" (the MPI that mpi4py was built against)
    # shellcheck disable=SC2086
    module load $MPITUNE_MODULES
fi

env_dir=${MPITUNE_ENV:-$PWD/.venv}
if [ -f "$env_dir/bin/activate" ]; then
    # shellcheck disable=SC1091
    source "$env_dir/bin/activate"
elif [ -n "${MPITUNE_ENV:-}" ] && command -v conda >/dev/null 2>&1; then
    eval "$(conda shell.bash hook)" && conda activate "$MPITUNE_ENV"
fi

exec python3 -m mpitune job "$@"
