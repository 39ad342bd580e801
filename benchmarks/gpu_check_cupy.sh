#!/usr/bin/env bash
# The CuPy backend on real GPUs: its tests and the GPU end-to-end tests, then every CUDA
# example tuned on two GPUs and on one, each compiling from an empty CuPy kernel cache.
# Everything lands in $OUT.
#
#   OUT=/tmp/gpu-check benchmarks/gpu_check_cupy.sh
#
# Needs CuPy, mpi4py, h5py, pytest and an MPI (mpirun) on the machine; installs nothing.
set -u
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MPITUNE_KERNEL_CACHE=off  # every run compiles, as its figures assume
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --bind-to none --mca btl_vader_single_copy_mechanism none"
EXAMPLES=${EXAMPLES:-"vector_add_cupy transpose_cupy matmul_cupy"}
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

{ nvidia-smi; python -c "import cupy; cupy.show_config()"; } > "$OUT/env.txt" 2>&1
note "GPUs: $GPUS"

SECONDS=0
timeout ${PYTEST_TIMEOUT_S:-300} python -m pytest -m gpu tests/ -v -rs -p no:cacheprovider > "$OUT/pytest.log" 2>&1
note "pytest rc=$? in ${SECONDS}s: $(tail -n 1 "$OUT/pytest.log")"

# Without a visible GPU the run must end with one line and exit code 2 on every rank.
CUDA_VISIBLE_DEVICES= timeout 60 $MPIRUN -n 1 python -m mpitune examples/vector_add_cupy/spec.py --cache /tmp/none.h5 \
    > "$OUT/nogpu.log" 2>&1
note "no GPU: rc=$? $(cat "$OUT/nogpu.log" | head -n 3)"

for example in $EXAMPLES; do
for n in 2 1; do
    [ "$n" -le "$GPUS" ] || continue
    export CUPY_CACHE_DIR=/tmp/cupy-cache-$example-n$n
    rm -rf "$CUPY_CACHE_DIR"
    limit=""
    [ "$n" -eq 1 ] && limit="--time-limit ${N1_TIME_LIMIT_S:-100}"
    h5=$OUT/$example-n$n.h5
    SECONDS=0
    timeout ${TUNE_TIMEOUT_S:-200} $MPIRUN -n $n python -m mpitune examples/$example/spec.py --cache "$h5" $limit \
        > "$OUT/tune-$example-n$n.log" 2>&1
    note "$example: tune -n $n rc=$? in ${SECONDS}s: $(tail -n 2 "$OUT/tune-$example-n$n.log" | tr '\n' ' ')"
    python -m mpitune report "$h5" >> "$OUT/reports.txt" 2>&1
    python - "$h5" >> "$OUT/summary.txt" 2>&1 <<'PY'
import sys
from collections import Counter

import numpy as np

from mpitune.store.reader import read

data = read(sys.argv[1])
res, runs = data.results, data.runs
ok = res[res["status"] == "ok"]
print(f"  {len(res)} results, statuses {dict(Counter(res['status']))}, wall {runs['wall_s'][-1]:.1f} s, "
      f"{len(res) / runs['wall_s'][-1]:.2f} configs/s")
for rank in np.unique(res["rank"]):
    mine = res[res["rank"] == rank]
    print(f"  rank {rank} on {mine['device'][0]}: {len(mine)} configs, compile {mine['compile_s'].sum():.1f} s, "
          f"verify {mine['verify_s'].sum():.1f} s, benchmark {mine['benchmark_s'].sum():.1f} s")
print(f"  median per config: compile {np.median(res['compile_s']):.3f} s, verify {np.median(res['verify_s']):.3f} s, "
      f"benchmark {np.median(res['benchmark_s']):.3f} s")
names = data.param_names
for row in ok[np.argsort(ok["time_ms"])][:3]:
    spread = np.nanmax(row["times_ms"]) / np.nanmin(row["times_ms"])
    print(f"  {row['time_ms']:.3f} ms (max/min of iterations {spread:.3f}) "
          + ", ".join(f"{k}={row[k]}" for k in names))
bad = res[res["status"] != "ok"]
for row in bad[:3]:
    print(f"  {row['status']}: {row['error'][:300]}")
PY
done
done
note "done"
