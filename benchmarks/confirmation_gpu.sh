#!/usr/bin/env bash
# What confirmation costs and what it names on a real GPU: every CUDA example tuned by brute
# force on one GPU with confirmation (the default) and without (--confirm 0), each from an empty
# CuPy kernel cache; prints each run's wall time, the confirmation's own seconds and share of its
# run (from the file), and the verdict. Everything lands in $OUT.
#
#   OUT=/tmp/confirm-gpu benchmarks/confirmation_gpu.sh
#
# Needs CuPy, mpi4py, h5py and an MPI (mpirun) on the machine; installs nothing.
set -u
OUT=${OUT:-$PWD/confirm-gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MPITUNE_KERNEL_CACHE=off  # every run compiles, as its figures assume
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=${MPIRUN:-"mpirun --bind-to none --mca btl_vader_single_copy_mechanism none"}
EXAMPLES=${EXAMPLES:-"vector_add_cupy transpose_cupy matmul_cupy"}
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

note "command: OUT=$OUT EXAMPLES=\"$EXAMPLES\" benchmarks/confirmation_gpu.sh"
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), $(nproc) cores"
for example in $EXAMPLES; do
    for confirm in 5 0; do
        export CUPY_CACHE_DIR=/tmp/cupy-cache-confirm-$example-$confirm
        rm -rf "$CUPY_CACHE_DIR"
        h5=$OUT/$example-confirm$confirm.h5
        start=$(date +%s.%N)
        timeout ${TUNE_TIMEOUT_S:-200} $MPIRUN -n 1 python -m mpitune examples/$example/spec.py --cache "$h5" \
            --strategy brute_force --confirm $confirm > "$OUT/tune-$example-$confirm.log" 2>&1
        rc=$?
        wall=$(python -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
        note "$example --confirm $confirm: rc=$rc, ${wall} s from start to exit"
        python -m mpitune report "$h5" > "$OUT/report-$example-$confirm.txt" 2>&1
        python -m mpitune report "$h5" --json > "$OUT/report-$example-$confirm.json" 2>&1
        python - "$OUT/report-$example-$confirm.json" >> "$OUT/summary.txt" 2>&1 <<'PY'
import json
import sys

s = json.load(open(sys.argv[1]))
run = s["run_list"][-1]
print(f"  {s['configs']} configurations, run wall {run['wall_s']:.1f} s, search best {s['best']['time_ms']:.4g} ms {s['best']['config']}")
c, cost = s["confirmation"], s["confirmation_cost"]
if c is None:
    print("  no confirmation")
else:
    print(f"  confirmed {c['winner_ms']:.4g} ms [{c['ci_ms'][0]:.4g}, {c['ci_ms'][1]:.4g}] {c['winner']}, tied {len(c['tied'])}: {c['tied']}")
    print(f"  confirmation: {cost['candidates']} candidates, {cost['launches']} launches, {cost['seconds']:.3f} s, "
          f"{100 * cost['share_of_run']:.2f} % of the run's wall time")
PY
    done
done
cat "$OUT/summary.txt"
