"""The HDF5 file: real files written, closed, reopened and read with plain h5py."""

import subprocess
import sys
from dataclasses import replace

import h5py
import numpy as np
import pytest
from conftest import IDENTITY, PARAMS, REPO, info
from records import append

from mpitune.errors import CacheMismatchError, UserError
from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.store.cache import Cache
from mpitune.store.reader import read


def write_run(path, ids):
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    results = [Result(i, "ok", time_ms=float(i), times_ms=[i, i, i], compile_s=0.1, rank=i % 2, batch=0) for i in ids]
    configs = [{"bs": 32, "kind": "b", "f": 0.5} for _ in ids]
    append(cache, results, configs, [(0, PhaseRow(0, -1, "wait", 0.0, 1.0))])
    cache.finish_run(2.0, "finished", len(ids))
    return cache


def test_round_trip_with_plain_h5py(tmp_path):
    path = tmp_path / "c.h5"
    write_run(path, [0, 1]).close()
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == 6
        res = f["results"][...]
        assert list(res["config_id"]) == [0, 1]
        assert res["kind"][0] == b"b" and res["f"][0] == 0.5 and res["bs"][0] == 32
        assert res["times_ms"].shape == (2, 3)
        assert res["host"][1] == b"h1"
        assert f["runs"][0]["status"] == b"finished" and f["runs"][0]["wall_s"] == 2.0
        assert len(f["ranks"]) == 2 and len(f["timeline"]) == 1


def test_reopen_resumes_and_appends_a_run(tmp_path):
    path = tmp_path / "c.h5"
    write_run(path, [0, 1]).close()
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert [r.config_id for r in cache.recorded()] == [0, 1]
    assert cache.start_run(info(), ["h"], ["d"], [1]) == 1
    cache.close()
    data = read(str(path))
    assert list(data.runs["run"]) == [0, 1]
    assert data.runs["status"][1] == "running"  # decoded to str for readers


def test_data_is_on_disk_before_close(tmp_path):
    """Flushed after every batch: a reader sees it while the writer still holds the file."""
    path = tmp_path / "c.h5"
    cache = write_run(path, [0, 1, 2])
    code = f"import h5py; print(len(h5py.File({str(path)!r}, 'r', libver='latest', swmr=True)['results']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    cache.close()
    assert out.stdout.strip() == "3", out.stderr


def _on_disk(path) -> list[int]:
    """The results' config ids and the timeline's length as another process reads them now."""
    code = (
        f"import h5py; f = h5py.File({str(path)!r}, 'r', libver='latest', swmr=True); "
        "print(list(f['results']['config_id']) + [len(f['timeline']), len(f['in_flight'])])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return eval(out.stdout) if out.stdout.strip() else [out.stderr]


def test_a_run_s_frequent_writes_wait_in_memory_until_due_then_go_in_one_write_out(tmp_path):
    """``write_within_s``: reports, hand-outs and timeline rows are written out together once
    due or asked for (rounds.py asks before waiting and at every stop); what the writer reads
    back comes from memory meanwhile; the rare writes (a run's row, its end) go at once."""
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3, write_within_s=3600.0)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])  # at once
    config = {"bs": 32, "kind": "b", "f": 0.5}
    cache.hand_out(0, [[0, 1], [2]], 3, [0, 1, 2], told=0)
    for i in range(3):
        result = Result(i, "ok", time_ms=float(i), times_ms=[i, i, i], rank=int(i == 2), batch=0)
        append(cache, [result], [config], [(0, PhaseRow(0, i, "wait", i, i + 1.0))], done_batch=0)
    assert _on_disk(path) == [0, 0]  # nothing of the batch yet
    assert cache.confirmations().verdict is None  # read from memory meanwhile
    cache.write_pending(now=False)  # not due
    assert _on_disk(path) == [0, 0]
    cache.write_pending()
    assert _on_disk(path) == [0, 1, 2, 3, 0]  # every row, the batch no longer in flight
    cache.hand_out(1, [[3], []], 1, [3], told=3)
    cache.finish_run(2.0, "finished", 3)  # at once, with what waited before it
    assert _on_disk(path) == [0, 1, 2, 3, 1]
    cache.close()
    data = read(str(path))
    assert list(data.results["config_id"]) == [0, 1, 2] and list(data.timeline["config_id"]) == [0, 1, 2]
    assert data.runs["status"][0] == "finished"
    with h5py.File(path, "r") as f:
        assert list(f["in_flight"]["config_id"]) == [3]


def test_a_file_closed_with_writes_waiting_holds_them(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3, write_within_s=3600.0)
    cache.start_run(info(), ["h"], ["d"], [1])
    append(cache, [Result(5, "ok", time_ms=1.0, times_ms=[1.0], rank=0, batch=0)], [{"bs": 32, "kind": "b", "f": 0.5}])
    cache.close()
    assert list(read(str(path)).results["config_id"]) == [5]


def test_other_problem_is_refused_naming_what_differs(tmp_path):
    path = tmp_path / "c.h5"
    write_run(path, [0]).close()
    other = replace(IDENTITY, kernel_name="other")
    with pytest.raises(CacheMismatchError, match="kernel_name"):
        Cache(str(path), other, PARAMS, iterations=3)
    assert len(read(str(path)).results) == 1


def test_nan_padding_for_short_times(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h"], ["d"], [1])
    append(cache, [Result(5, "compile_error", error="bad", rank=0)], [{"bs": 64, "kind": "a", "f": 1.0}], [])
    cache.close()
    row = read(str(path)).results[0]
    assert np.isnan(row["times_ms"]).all() and row["error"] == "bad" and row["status"] == "compile_error"


KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from mpitune.store.cache import Cache, RunInfo
from mpitune.model.result import Result
from conftest import IDENTITY, PARAMS, info
from records import append
cache = Cache({path!r}, IDENTITY, PARAMS, iterations=3)
cache.start_run(info(), ["h"], ["d"], [1])
append(cache, [Result(3, "ok", time_ms=1.0, rank=0)], [{{"bs": 64, "kind": "a", "f": 1.0}}])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_loses_nothing_written_and_the_file_reopens(tmp_path):
    path = tmp_path / "c.h5"
    code = KILLED_WRITER.format(repo=str(REPO), path=str(path))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO / "tests", capture_output=True)
    assert proc.returncode == -9
    with open(path, "rb") as fh:
        assert fh.read(12)[11] != 0  # the killed writer's open-for-write mark is still there
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert [r.config_id for r in cache.recorded()] == [3]
    cache.close()
    assert read(str(path)).runs["status"][0] == "killed"  # repaired on reopen


def test_a_second_writer_is_refused_while_the_first_lives(tmp_path):
    path = str(tmp_path / "c.h5")
    first = write_run(path, [0])
    with pytest.raises(UserError, match="another mpitune run is writing"):
        Cache(path, IDENTITY, PARAMS, iterations=3)
    first.close()
    Cache(path, IDENTITY, PARAMS, iterations=3).close()


def test_strings_are_utf8_and_cut_to_their_field(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, {"kind": ["ä", "bb"]}, iterations=1)
    cache.start_run(info(command="python -m mpitune spëc.py"), ["hôst"], ["d"], [1])
    append(cache, [Result(0, "compile_error", error="ü" * 5000, rank=0)], [{"kind": "ä"}], [])
    cache.close()
    data = read(str(path))
    row = data.results[0]
    assert row["kind"] == "ä" and row["host"] == "hôst" and row["error"].startswith("üüü")
    assert len(row["error"].encode()) <= 1024
    assert data.runs["command"][0] == "python -m mpitune spëc.py"


def test_metrics_and_observed_values_beside_the_results(tmp_path):
    """Observed values are measured (named in the identity); metrics are derived, so a reopen
    with other metrics lays them out afresh for ``rewrite_metrics``; a cut-short write is aligned."""
    from mpitune.model.objective import Metric, Objective

    path = tmp_path / "c.h5"
    identity = replace(IDENTITY, observed_names=("power_w",))
    double = Objective("double", True, [Metric("double", lambda p: 2 * p["power_w"], "2 * power_w")], ["power_w"])
    cache = Cache(str(path), identity, PARAMS, 3, double)
    cache.start_run(info(), ["h0"], ["d0"], [10])
    results = [
        double.evaluate(Result(i, "ok", time_ms=1.0, observed={"power_w": 10.0 + i}, rank=0), {}) for i in range(3)
    ] + [double.evaluate(Result(3, "compile_error", rank=0), {})]
    append(cache, results, [{"bs": 32, "kind": "a", "f": 0.5}] * 4, [])
    cache.close()
    data = read(str(path))
    assert data.metric_names == ["double"] and data.observed_names == ["power_w"]
    np.testing.assert_array_equal(data.metrics[:, 0], [20.0, 22.0, 24.0, np.nan])
    np.testing.assert_array_equal(data.observed[:, 0], [10.0, 11.0, 12.0, np.nan])
    assert data.objective.record() == {
        "objective": "double",
        "higher_is_better": True,
        "metrics": {"double": "2 * power_w"},
    }

    with h5py.File(path, "a") as f:  # a writer killed between the results and the metrics of a batch
        f["metrics"].resize((2, 1))
    triple = Objective(
        metrics=[
            Metric("triple", lambda p: 3 * p["power_w"], "3 * power_w"),
            Metric("t2", lambda p: p["triple"] + p["time"], "triple + time"),
        ],
        observed_names=["power_w"],
    )
    cache = Cache(str(path), identity, PARAMS, 3, triple)
    known = cache.recorded()
    assert [r.observed for r in known] == [
        {"power_w": 10.0},
        {"power_w": 11.0},
        {"power_w": 12.0},
        {"power_w": pytest.approx(np.nan, nan_ok=True)},
    ]
    cache.rewrite_metrics([triple.evaluate(r, {}) for r in known])
    cache.close()
    data = read(str(path))
    assert data.metric_names == ["triple", "t2"] and data.objective.name == "time"
    np.testing.assert_array_equal(data.metrics, [[30, 31], [33, 34], [36, 37], [np.nan, np.nan]])
    with pytest.raises(CacheMismatchError, match="observed_names"):
        Cache(str(path), IDENTITY, PARAMS, 3)


def test_a_file_without_metrics_reads_with_time_as_its_objective(tmp_path):
    write_run(tmp_path / "c.h5", [0, 1]).close()
    with h5py.File(tmp_path / "c.h5", "a") as f:  # as files written before metrics existed
        del f.attrs["objective"]
    data = read(str(tmp_path / "c.h5"))
    assert data.objective.name == "time" and data.metric_names == []
    assert data.metrics.shape == (2, 0) and data.observed.shape == (2, 0)


def test_an_unusable_cache_path_is_refused_before_start_up(tmp_path):
    from mpitune.store.integrity import refuse_unusable

    refuse_unusable(str(tmp_path / "new.h5"))  # absent: the run creates it
    write_run(tmp_path / "c.h5", [0]).close()
    refuse_unusable(str(tmp_path / "c.h5"))  # an existing cache resumes
    text = tmp_path / "notes.h5"
    text.write_text("not HDF5\n")
    with pytest.raises(UserError) as refused:
        refuse_unusable(str(text))
    assert str(refused.value) == f"{text} exists and is not an HDF5 file; pass --cache NEW.h5 or remove it"
    with pytest.raises(UserError, match="exists and is not an HDF5 file"):
        refuse_unusable(str(tmp_path))


def test_two_batches_in_flight_are_recorded_apart_and_a_killed_runs_record_goes_with_the_next_hand_out(tmp_path):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d", "d"], [1, 2])
    cache.hand_out(0, [[0], [1]], 2, [0, 1])
    cache.hand_out(1, [[2], [3]], 2, [2, 3])
    # Batch 0 recorded: batch 1 is still in flight, and stays so when the writer dies.
    config = {"bs": 32, "kind": "a", "f": 0.5}
    append(cache, [Result(i, "ok", time_ms=1.0, rank=i) for i in (0, 1)], [config] * 2, [], 0)
    assert sorted(cache.in_flight["config_id"].tolist()) == [2, 3]
    cache.hand_out(2, [[4], [5]], 2, [4, 5])
    cache.close()
    reopened = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert reopened.interrupted == (
        "batch 1 of run 0 was in flight: rank 0 held 2; rank 1 held 3; "
        "batch 2 of run 0 was in flight: rank 0 held 4; rank 1 held 5"
    )
    reopened.start_run(info(), ["h0", "h1"], ["d", "d"], [1, 2])
    reopened.hand_out(0, [[2], [3]], 2, [2, 3])  # the next run's record replaces the killed run's
    assert [(int(r["run"]), int(r["batch"])) for r in reopened.in_flight[...]] == [(1, 0), (1, 0)]
    reopened.close()
