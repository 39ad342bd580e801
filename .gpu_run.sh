#!/bin/bash
# One call on the GPU machine: refilled runs through rank 0's lane with CuPy, then the GPU suite.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --bind-to none --mca btl_vader_single_copy_mechanism none"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import cupy, mpi4py, h5py; print(cupy.__version__, mpi4py.__version__, h5py.__version__)"
for schedule in refill batches; do
  start=$(date +%s)
  timeout 240 $MPIRUN -n 2 python3 -m mpitune examples/matmul_cupy/spec.py --schedule $schedule --max-fevals 96 --out $OUT/$schedule.h5 > $OUT/$schedule.out 2> $OUT/$schedule.err
  echo "$schedule rc=$? wall=$(( $(date +%s) - start ))"
  tail -4 $OUT/$schedule.out; tail -3 $OUT/$schedule.err
  python3 -m mpitune check $OUT/$schedule.h5 | tail -2
  python3 -m mpitune report $OUT/$schedule.h5 > $OUT/$schedule.report; echo "report rc=$?"; grep -i -A12 "rank" $OUT/$schedule.report | head -30
done
python3 - <<'PY'
import h5py, numpy as np, os
for name in ("refill", "batches"):
    g = h5py.File(os.environ["OUT"] + f"/{name}.h5", "r")
    t = g["timeline"][...]
    ph = np.char.strip(t["phase"].astype(str))
    waits = t[ph == "compile"]
    print(name, "compile waits s", round(float((waits["end_s"] - waits["start_s"]).sum()), 2), "wall", round(float(g["runs"]["wall_s"][0]), 2))
f = h5py.File(os.environ["OUT"] + "/refill.h5", "r")
r = f["results"][...]
print("results", len(r), "unique", len(set(r["config_id"].tolist())), "ranks", sorted(set(r["rank"].tolist())))
print("told rows", f["told"][...].tolist()[:8], "in_flight", len(f["in_flight"]))
t = f["timeline"][...]
ph = np.char.strip(t["phase"].astype(str))
print("rank 0 phases", sorted(set(ph[t["rank"] == 0].tolist())))
PY
find . -name __pycache__ -prune -exec rm -rf {} + ; MPITUNE_MPIEXEC="$MPIRUN" timeout 420 python3 -m pytest -m gpu tests/ -q -o addopts="" -p no:cacheprovider 2>&1 | tail -8
