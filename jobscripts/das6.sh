#!/bin/bash
# Tune one spec on DAS-6 GPU nodes: one MPI rank per GPU, stopped cleanly before the job's
# time limit and (by default) requeued so that the next job resumes where this one stopped.
#
#   sbatch jobscripts/das6.sh SPEC [mpitune flags]
#   sbatch -N 2 -C A4000 --gres=gpu:1 jobscripts/das6.sh spec.py --strategy random_sample
#
# Resources: the lines below are defaults; flags given to sbatch override them.
#SBATCH --job-name=mpitune
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1   # one rank per GPU: keep equal to the count in --gres=gpu:N
#SBATCH --gres=gpu:1          # GPUs per node
#SBATCH -C A4000              # GPU type; DAS-6 also has e.g. A6000, A100
#SBATCH --time=00:15:00       # the limit for jobs during working hours on DAS-6
#SBATCH --signal=B:USR1@90    # warn this script 90 s before the limit (Slurm may send it up to a minute early)
#SBATCH --requeue             # allow the requeue below
#SBATCH --output=mpitune-%j.out
#
# Knobs (environment variables, set before sbatch or in the job's environment):
#   MPITUNE_ENV       a virtual environment or conda prefix to activate (default: $PWD/.venv if present)
#   MPITUNE_MODULES   modules to load where `module` exists (default: "prun cuda12.6/toolkit")
#   MPITUNE_LAUNCHER  srun (default) or mpirun (inside this allocation)
#   MPITUNE_SRUN_MPI  srun's --mpi plugin (default: pmix for Open MPI, pmi2 for MPICH, from mpi4py)
#   MPITUNE_REQUEUE   1 (default): requeue this job when the run stopped early and can resume
#   MPITUNE_MARGIN_S  if set, also pass --time-limit = time left in this job minus this margin
set -uo pipefail

if [ $# -lt 1 ]; then
    echo "usage: sbatch jobscripts/das6.sh SPEC [mpitune flags]" >&2
    exit 2
fi

# --- site-specific: DAS-6 modules (skipped where there is no module command) ---------------
if type module >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    module load ${MPITUNE_MODULES:-prun cuda12.6/toolkit} || echo "mpitune job: some modules did not load" >&2
fi

# --- the user's Python environment -----------------------------------------------------------
env_dir=${MPITUNE_ENV:-}
if [ -z "$env_dir" ] && [ -d "$PWD/.venv" ]; then
    env_dir=$PWD/.venv
fi
if [ -n "$env_dir" ]; then
    if [ -f "$env_dir/bin/activate" ]; then
        # shellcheck disable=SC1091
        source "$env_dir/bin/activate"
    elif command -v conda >/dev/null 2>&1; then
        eval "$(conda shell.bash hook)" && conda activate "$env_dir"
    fi
fi
python=$(command -v python3 || command -v python)

# --- how to start the ranks -------------------------------------------------------------------
launcher=${MPITUNE_LAUNCHER:-srun}
if [ "$launcher" = srun ]; then
    plugin=${MPITUNE_SRUN_MPI:-}
    if [ -z "$plugin" ]; then
        # A plugin that does not match the MPI library gives N worlds of one rank each
        # (mpitune refuses to run then); pick it from the library mpi4py loads.
        if "$python" -c "from mpi4py import MPI; import sys; sys.exit('Open MPI' not in MPI.Get_library_version())"; then
            plugin=pmix
        else
            plugin=pmi2
        fi
    fi
    start=(srun --mpi="$plugin" --kill-on-bad-exit=1)
else
    start=(mpirun -n "${SLURM_NTASKS:-1}")
fi

# --- stop cleanly before the limit --------------------------------------------------------------
# Slurm's warning reaches this script; mpitune's rank 0 notices the stop file before the next
# batch, lets the batch in flight finish, flushes the results and exits with 75 on every rank.
stop_file=$PWD/.mpitune-stop-${SLURM_JOB_ID:-$$}
rm -f "$stop_file"
trap 'echo "mpitune job: the time limit is near, asking the run to stop"; touch "$stop_file"' USR1 TERM

extra=()
if [ -n "${MPITUNE_MARGIN_S:-}" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    left=$(squeue -h -j "$SLURM_JOB_ID" -o %L)   # [days-]hours:minutes:seconds left
    left_s=$(echo "$left" | awk -F'[-:]' '{n=NF; s=$n+60*$(n-1); if(n>2)s+=3600*$(n-2); if(n>3)s+=86400*$(n-3); print s}')
    if [ "$((left_s - MPITUNE_MARGIN_S))" -gt 0 ]; then
        extra=(--time-limit "$((left_s - MPITUNE_MARGIN_S))")
    fi
fi

echo "mpitune job ${SLURM_JOB_ID:-}: ${SLURM_NTASKS:-1} rank(s) on ${SLURM_JOB_NODELIST:-$(hostname)} with ${start[*]}"
"${start[@]}" "$python" -m mpitune "$@" --stop-file "$stop_file" "${extra[@]}" &
launched=$!
rc=0
wait "$launched" || rc=$?
while [ "$rc" -gt 128 ] && kill -0 "$launched" 2>/dev/null; do   # a trapped signal interrupted wait
    rc=0
    wait "$launched" || rc=$?
done
rm -f "$stop_file"

if [ "$rc" -eq 75 ]; then
    echo "mpitune job: stopped early; the results so far are saved and a rerun resumes"
    if [ "${MPITUNE_REQUEUE:-1}" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        scontrol requeue "$SLURM_JOB_ID" && echo "mpitune job: requeued $SLURM_JOB_ID"
    fi
fi
exit "$rc"
