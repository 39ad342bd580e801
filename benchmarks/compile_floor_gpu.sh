#!/usr/bin/env bash
# Where a cold run's compile time goes on a GPU, and how close mpitune's cold run is to its floor:
#   1. benchmarks/compile_anatomy.py on a machine that has compiled nothing yet (run this first);
#   2. benchmarks/vs_kernel_tuner.py on one GPU, both tuners cold (new HOME, TMPDIR and driver
#      cache for each, CuPy's cache empty, mpitune's kernel cache off);
#   3. mpitune alone twice more, the same way: what a second cold-configured run on a machine that
#      has compiled these kernels costs (the "warm machine" case);
#   4. benchmarks/kernel_cache.py --only cupy: a second run with another strategy from the cache.
# Everything lands in $OUT; summary.txt holds the figures.
#
#   OUT=/tmp/floor benchmarks/compile_floor_gpu.sh
#
# Needs CuPy, mpi4py, h5py, Kernel Tuner 1.5.0 and an MPI (mpirun) on the machine; installs nothing.
set -u
OUT=${OUT:-$PWD/compile-floor}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
MPIRUN=${MPIRUN:-"mpirun --bind-to none --mca btl_vader_single_copy_mechanism none"}
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1), $(nproc) cores"
SECONDS=0
timeout 240 python benchmarks/compile_anatomy.py --configs 24 --workers 15 > "$OUT/anatomy.jsonl" 2>&1
note "anatomy rc=$? in ${SECONDS}s"
cat "$OUT/anatomy.jsonl" >> "$OUT/summary.txt"

SECONDS=0
timeout 400 python benchmarks/vs_kernel_tuner.py --gpus 1 --out /tmp/vs --json "$OUT/vs_kernel_tuner.json" \
    > "$OUT/vs_kernel_tuner.txt" 2>&1
note "vs_kernel_tuner rc=$? in ${SECONDS}s"
cat "$OUT/vs_kernel_tuner.txt" >> "$OUT/summary.txt"
python -m mpitune report /tmp/vs/mpitune-1gpu/results.h5 >> "$OUT/summary.txt" 2>&1 || ls /tmp/vs >> "$OUT/summary.txt"

for again in 1 2; do
    run=/tmp/again-$again
    rm -rf "$run" && mkdir -p "$run"/{home,tmp,cuda,xdg}
    start=$(date +%s.%N)
    HOME=$run/home TMPDIR=$run/tmp CUDA_CACHE_PATH=$run/cuda XDG_CACHE_HOME=$run/xdg MPITUNE_KERNEL_CACHE=off \
        timeout 120 $MPIRUN -n 1 python -m mpitune examples/matmul_cupy/spec.py --strategy brute_force \
        --cache "$run/run.h5" > "$run/log" 2>&1
    rc=$?
    note "mpitune again $again (new HOME/TMPDIR/driver cache, kernel cache off): rc=$rc wall_s=$(python -c "import time; print(round(time.time() - $start, 2))")"
    tail -n 3 "$run/log" >> "$OUT/summary.txt"
    python -m mpitune report "$run/run.h5" >> "$OUT/summary.txt" 2>&1
done

SECONDS=0
MPITUNE_MPIEXEC="$MPIRUN" timeout 200 python benchmarks/kernel_cache.py --only cupy > "$OUT/kernel_cache.txt" 2>&1
note "kernel_cache --only cupy rc=$? in ${SECONDS}s"
cat "$OUT/kernel_cache.txt" >> "$OUT/summary.txt"
