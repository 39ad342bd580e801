"""The layouts of schema versions 1 and 2, spelled out: files written before the schema module
existed hold exactly the dtypes of version 1, which must still read, resume and report; what the
store writes today must equal version 2 byte for byte."""

import hashlib
import json
from dataclasses import replace

import h5py
import numpy as np
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.offline import analysis
from mpitune.offline.summary import summarize
from mpitune.store.cache import Cache
from mpitune.store.reader import read

# As the writer of schema version 1 declared them, for PARAMS and 3 iterations.
RESULTS_V1 = np.dtype(
    [
        ("config_id", np.int64),
        ("bs", np.int64),
        ("kind", "S1"),
        ("f", np.float64),
        ("status", "S16"),
        ("time_ms", np.float64),
        ("times_ms", np.float64, (3,)),
        ("compile_s", np.float64),
        ("verify_s", np.float64),
        ("benchmark_s", np.float64),
        ("run", np.int32),
        ("batch", np.int64),
        ("rank", np.int32),
        ("host", "S96"),
        ("device", "S96"),
        ("started_s", np.float64),
        ("finished_s", np.float64),
        ("error", "S1024"),
    ]
)
TIMELINE_V1 = np.dtype(
    [
        ("run", np.int32),
        ("rank", np.int32),
        ("batch", np.int64),
        ("config_id", np.int64),
        ("phase", "S16"),
        ("start_s", np.float64),
        ("end_s", np.float64),
    ]
)
RUNS_V1 = np.dtype(
    [
        ("run", np.int32),
        ("started_unix", np.float64),
        ("wall_s", np.float64),
        ("ranks", np.int32),
        ("strategy", "S96"),
        ("seed", np.int64),
        ("max_fevals", np.int64),
        ("time_limit_s", np.float64),
        ("batch_size", np.int32),
        ("space_size", np.int64),
        ("measured", np.int64),
        ("status", "S16"),
        ("command", "S1024"),
        ("version", "S16"),
    ]
)
IN_FLIGHT_V1 = np.dtype([("run", np.int32), ("batch", np.int64), ("rank", np.int32), ("config_id", np.int64)])
RANKS_V1 = np.dtype(
    [
        ("run", np.int32),
        ("rank", np.int32),
        ("host", "S96"),
        ("device", "S96"),
        ("device_detail", "S96"),
        ("pid", np.int64),
    ]
)
# Version 2: the results gained launches and raced (racing, model/judging/racing.py) after benchmark_s.
RESULTS_V2 = np.dtype(RESULTS_V1.descr[:10] + [("launches", np.int32), ("raced", np.int8)] + RESULTS_V1.descr[10:])
RESULTS_V3 = np.dtype(
    RESULTS_V1.descr[:10] + [("launches", np.int32), ("raced", np.int8), ("throttled", "S96")] + RESULTS_V1.descr[10:]
)
V1 = {"results": RESULTS_V1, "timeline": TIMELINE_V1, "runs": RUNS_V1, "in_flight": IN_FLIGHT_V1, "ranks": RANKS_V1}


# Version 3 added the tables of the ranks' devices compared (store/devices.py).
CONFIRMATION_V3 = {
    "retimed": np.dtype(
        [
            ("run", "<i4"),
            ("batch", "<i8"),
            ("rank", "<i4"),
            ("config_id", "<i8"),
            ("round", "<i4"),
            ("time_ms", "<f8"),
            ("purpose", "S16"),
        ]
    ),
    "confirmed": np.dtype(
        [
            ("run", "<i4"),
            ("config_id", "<i8"),
            ("median_ms", "<f8"),
            ("ci_lo_ms", "<f8"),
            ("ci_hi_ms", "<f8"),
            ("launches", "<i4"),
            ("winner", "i1"),
            ("tied", "i1"),
            ("started_s", "<f8"),
            ("finished_s", "<f8"),
        ]
    ),
    "device_factors": np.dtype(
        [
            ("run", "<i4"),
            ("batch", "<i8"),
            ("rank", "<i4"),
            ("factor", "<f8"),
            ("sd", "<f8"),
            ("flagged", "i1"),
            ("source", "S16"),
        ]
    ),
}


PRIORS_V4 = np.dtype(
    [
        ("run", "<i4"),
        ("path", "S1024"),
        ("kernel_name", "S96"),
        ("device", "S96"),
        ("problem_size", "S96"),
        ("shared", "S1024"),
        ("matched", "<i8"),
        ("sha256", "S64"),
    ]
)

# Version 5: one row per ask made whenever ranks wanted work, how many of its run's rows were told before it.
TOLD_V5 = np.dtype([("run", "<i4"), ("batch", "<i8"), ("rows", "<i8")])
# Version 6: how each run handed out its work.
SCHEDULES_V6 = np.dtype([("run", "<i4"), ("schedule", "S16")])


def test_the_store_writes_the_dtypes_of_schema_version_6(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), replace(IDENTITY, observed_names=("power_w",)), PARAMS, iterations=3)
    cache.start_run(replace(info(), schedule="refill"), ["h"], ["d"], [1])
    cache.hand_out(0, [[0]], requested=1, asked=[0], told=0)
    append(
        cache,
        [Result(0, "ok", time_ms=1.0, times_ms=[1.0], observed={"power_w": 5.0}, rank=0)],
        [{"bs": 32, "kind": "a", "f": 0.5}],
        [(0, PhaseRow(0, 0, "compile", 0.0, 1.0))],
    )
    cache.close()
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == 6
        tables = {
            **V1,
            "results": RESULTS_V3,
            **CONFIRMATION_V3,
            "priors": PRIORS_V4,
            "told": TOLD_V5,
            "schedules": SCHEDULES_V6,
        }
        for name, dtype in tables.items():
            assert f[name].dtype == dtype, name
            assert f[name].dtype.itemsize == dtype.itemsize
        assert f["observed"].dtype == np.float64 and f["observed"].shape == (1, 1)
        assert "strategy_state" not in f and "strategy_key" not in f  # nothing executable is stored
        assert f["asked"][...].tolist() == [(0, 0, 1, 0)] and f["told"][...].tolist() == [(0, 0, 0)]
        assert f["schedules"][...].tolist() == [(0, b"refill")]
        assert all(f[name].fletcher32 for name in (*V1, "observed", "asked", "told", "searches"))
        assert "metrics" not in f  # no metrics: no dataset, as before


def test_a_file_laid_out_by_hand_as_version_1_reads_and_resumes(tmp_path):
    """Only h5py and the explicit dtypes above: what an earlier mpitune left on disk."""
    path = tmp_path / "old.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["schema_version"] = 1
        problem = json.dumps(IDENTITY.record(), sort_keys=True)
        f.attrs["problem_hash"] = hashlib.sha256(problem.encode()).hexdigest()
        f.attrs["problem"] = problem
        f.attrs["param_names"] = json.dumps(list(PARAMS))
        for name, dtype in V1.items():
            f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(16,))
        f.create_dataset("strategy_state", shape=(0,), maxshape=(None,), dtype=np.uint8, chunks=(1 << 16,))
        f.create_dataset("strategy_key", shape=(1,), dtype="S64")
        row = np.zeros(1, RESULTS_V1)
        row[0] = (7, 64, b"b", 1.0, b"ok", 2.5, [2.5, 2.4, 2.6], 0.1, 0.01, 0.02, 0, 0, 0, b"h", b"d", 0.0, 1.0, b"")
        f["results"].resize((1,))
        f["results"][:] = row
        run = np.zeros(1, RUNS_V1)
        run[0] = (0, 1.0, 1.5, 1, b"brute_force", 0, -1, np.nan, 1, 8, 1, b"finished", b"cmd", b"0")
        f["runs"].resize((1,))
        f["runs"][:] = run
    data = read(str(path))
    assert data.schema_version == 1 and data.objective.name == "time" and not data.objective.higher_is_better
    assert data.results["kind"][0] == "b" and data.results["time_ms"][0] == 2.5 and data.metrics.shape == (1, 0)
    assert data.results["launches"].tolist() == [3] and data.results["raced"].tolist() == [0]  # the defaults
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert [(r.config_id, r.time_ms, r.raced) for r in cache.recorded()] == [(7, 2.5, False)]
    assert cache.start_run(info(), ["h"], ["d"], [1]) == 1
    append(
        cache,
        [Result(3, "ok", time_ms=1.0, times_ms=[1.0, 1.1], raced=True, rank=0)],
        [{"bs": 32, "kind": "a", "f": 0.5}],
        [],
    )
    cache.close()
    with h5py.File(path, "r") as f:  # resuming keeps the file's layout; the history was added
        assert f["results"].dtype == RESULTS_V1
        assert "asked" in f and "told" in f and "searches" in f and not f["results"].fletcher32
    data = read(str(path))
    assert data.results["config_id"].tolist() == [7, 3]
    assert data.results["launches"].tolist() == [3, 2] and data.results["raced"].tolist() == [0, 0]
    summary = summarize(data)
    assert (
        summary.configs == 2 and summary.best is not None and summary.best.config == {"bs": 32, "kind": "a", "f": 0.5}
    )
    frame = analysis.frames(data).results
    assert frame["launches"].tolist() == [3, 2] and frame["raced"].tolist() == [0, 0]
