"""The Pareto front in the file: recorded when a run of several objectives ends, computed the same
way by the reader from the stored rows, and absent from a file of one objective."""

import h5py
import numpy as np
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.objective import Metric, Objective
from mpitune.model.result import Result
from mpitune.store.cache import Cache
from mpitune.store.reader import read

# Time (lower is better) against a metric, the block size bs (higher is better).
TWO = Objective(["time", "bs"], [False, True], [Metric("bs", lambda p: float(p["bs"]), "bs")])
CONFIGS = [{"bs": bs, "kind": "a", "f": f} for bs in (32, 64) for f in (0.5, 1.0)]  # ids 0..3
# (time, bs): id 0 (1 ms, 32) and id 2 (2 ms, 64) are the front; id 1 (3 ms, 32) is dominated by 0;
# id 3 failed (its time alone would have put it on the front).
TIMES = {0: 1.0, 1: 3.0, 2: 2.0, 3: 0.5}


def run(path, objective: Objective, ids=(0, 1, 2, 3), finish: bool = True) -> None:
    cache = Cache(str(path), IDENTITY, PARAMS, 3, objective)
    cache.start_run(info(), ["h0"], ["d0"], [10])
    results = [
        objective.evaluate(Result(i, "ok" if i != 3 else "verify_failed", time_ms=TIMES[i], rank=0), CONFIGS[i])
        for i in ids
    ]
    append(cache, results, [CONFIGS[i] for i in ids], [])
    if finish:
        cache.finish_run(1.0, "finished", len(results))
    cache.close()


def test_the_front_is_recorded_at_the_end_and_computed_alike_from_the_rows(tmp_path):
    path = tmp_path / "c.h5"
    run(path, TWO, ids=(0, 1, 2), finish=False)
    data = read(str(path))
    assert data.recorded_front is None  # not yet recorded, but computable from the rows at any time
    assert data.results["config_id"][data.front_rows()].tolist() == [0, 2]
    run(path, TWO, ids=(3,))  # a second run ends: the front of everything the file holds
    data = read(str(path))
    assert data.objective.names == ("time", "bs") and data.objective.directions == (False, True)
    assert data.recorded_front.tolist() == [0, 2]
    assert data.results["config_id"][data.front_rows()].tolist() == [0, 2]
    values = data.objective_values()
    assert values[:4].tolist()[:3] == [[1.0, 32.0], [3.0, 32.0], [2.0, 64.0]] and np.isnan(values[3]).all()


def test_a_run_of_one_objective_drops_the_front_of_another(tmp_path):
    path = tmp_path / "c.h5"
    run(path, TWO)
    run(path, Objective(), ids=())  # time alone, nothing new measured
    with h5py.File(path) as f:
        assert "front" not in f
    data = read(str(path))
    assert data.recorded_front is None and data.objective.names == ("time",)
    assert data.results["config_id"][data.front_rows()].tolist() == [0]  # the fastest that passed
