"""Export to Kernel Tuner JSON caches and T4 results; import of Kernel Tuner caches.

Real files throughout: a real mpitune run, the real Kernel Tuner caches in the shared data
folder (where present), and the real ``kernel-tuner`` package (1.5.0, the test extra's pin):
its own C run writes a cache, its simulation mode replays our exports, its T4 schema checks ours.

Where the two tuners disagree on a cache, the test says which is right and why."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import mpi_env, report_json

from mpitune.errors import UserError
from mpitune.offline.exchange import export_kt_json
from mpitune.offline.kt_import import import_kt
from mpitune.store.measured import load as load_measured

# Kernel Tuner and jsonschema are the test extra's; where they are absent (a GPU machine set up for
# CuPy alone) these tests skip with the reason and the rest of the suite runs.
kernel_tuner = pytest.importorskip(
    "kernel_tuner", reason="needs kernel_tuner (the test extra): pip install -e '.[test]'"
)
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (the test extra): pip install -e '.[test]'")


def offline(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpitune", *map(str, args)], env=mpi_env(), capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def cache(run_with_failures):
    return run_with_failures


def best_of(measured) -> tuple:
    ok = [(m.time_ms, c) for c, m in zip(measured.configs, measured.measurements) if m.status == "ok"]
    return min(ok)[1]


def replay_in_kernel_tuner(path: Path, restrictions=None) -> dict:
    """Kernel Tuner's simulation mode over the whole space of the cache; the best config."""
    doc = json.loads(Path(path).read_text())
    tune_params = {k: doc["tune_params"][k] for k in doc["tune_params_keys"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # about the placeholder argument, which it never runs
        results, _ = kernel_tuner.tune_kernel(
            doc["kernel_name"],
            f"void {doc['kernel_name']}() {{}}",
            doc["problem_size"],
            [np.zeros(1, np.float32)],
            tune_params,
            restrictions=restrictions,
            cache=str(path),
            simulation_mode=True,
            strategy="brute_force",
            quiet=True,
            lang="C",
        )
    ok = [r for r in results if isinstance(r.get("time"), float)]
    assert len(results) == len(doc["cache"])
    return {k: min(ok, key=lambda r: r["time"])[k] for k in tune_params}


def test_kt_json_export_of_a_real_run(cache, tmp_path):
    out = tmp_path / "kt.json"
    proc = offline("export", cache, "--format", "kt-json", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["kernel_name"] == "scale" and doc["tune_params_keys"] == ["STEP", "MODE"]
    assert len(doc["cache"]) == 12
    for key, entry in doc["cache"].items():
        assert key == f"{entry['STEP']},{entry['MODE']}"
        if entry["MODE"] == 0:
            assert isinstance(entry["time"], float) and len(entry["times"]) == 3
            # Kernel Tuner's time is the mean of times; ours stays mpitune's median, the better
            # ranking (a cold first launch moves a mean), so that its replay ranks as we did.
            assert entry["time"] == pytest.approx(statistics.median(entry["times"]), rel=1e-12)
        else:
            assert entry["time"] == ("CompilationFailedConfig" if entry["MODE"] == 1 else "RuntimeFailedConfig")
        assert entry["compile_time"] > 0  # ms
    # Kernel Tuner's layout: it reads a file that ends in "}\n}" as closed.
    assert out.read_text().rstrip().endswith("}\n}")
    back = load_measured(str(out))
    assert best_of(back) == (report_json(cache)["best"]["config"]["STEP"], 0)


def test_kernel_tuner_replays_the_export_with_the_same_best(cache, tmp_path):
    out = tmp_path / "kt.json"
    export_kt_json(str(cache), str(out))
    best = replay_in_kernel_tuner(out)
    assert best == report_json(cache)["best"]["config"]


def t4_schema() -> dict | None:
    spec = importlib.util.find_spec("kernel_tuner")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "schema" / "T4" / "1.0.0" / "results-schema.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_t4_export_validates_against_the_t4_schema(cache, tmp_path):
    out = tmp_path / "t4.json"
    proc = offline("export", cache, "--format", "t4", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == "1.0.0" and len(doc["results"]) == 12
    by_mode = {r["configuration"]["MODE"]: r for r in doc["results"]}
    assert by_mode[0]["invalidity"] == "correct" and by_mode[0]["correctness"] == 1
    assert by_mode[1]["invalidity"] == "compile"
    assert by_mode[2]["invalidity"] == "correctness" and by_mode[2]["correctness"] == 0
    assert len(by_mode[0]["times"]["runtimes"]) == 3
    schema = t4_schema()
    assert schema is not None, "kernel_tuner no longer bundles schema/T4/1.0.0/results-schema.json"
    jsonschema.validate(doc, schema)


def test_import_of_an_export_has_the_layout_of_a_real_run(cache, tmp_path):
    kt = tmp_path / "kt.json.gz"
    export_kt_json(str(cache), str(kt))
    with gzip.open(kt, "rt") as fh:
        assert json.load(fh)["cache"]
    out = tmp_path / "back.h5"
    proc = offline("import", kt, "--out", out)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as a, h5py.File(out, "r") as b:
        for name in ("results", "timeline", "runs", "ranks"):
            assert a[name].dtype == b[name].dtype
        assert set(a.attrs) == set(b.attrs)
        run = b["runs"][0]
        assert run["strategy"].decode() == "import" and "mpitune import" in run["command"].decode()
        assert run["status"].decode() == "finished" and run["measured"] == 12
        configs = lambda f: sorted(zip(f["results"]["STEP"], f["results"]["MODE"], f["results"]["status"]))
        assert configs(a) == configs(b)
        timeline = np.sort(b["timeline"][...], order="start_s")
        assert (timeline["start_s"][1:] - timeline["end_s"][:-1]).min() > -1e-9
    assert report_json(out)["best"]["config"] == report_json(cache)["best"]["config"]
    # The replay backend reads measured data from the imported file as from a run's.
    assert best_of(load_measured(str(out))) == best_of(load_measured(str(cache)))


def test_import_repairs_a_cache_its_writer_never_closed(cache, tmp_path):
    kt = tmp_path / "open.json"
    export_kt_json(str(cache), str(kt))
    text = kt.read_text().rstrip()
    kt.write_text(text[: -len("}\n}")] + ",")  # as Kernel Tuner leaves it when killed
    import_kt(str(kt), str(tmp_path / "open.h5"))
    assert report_json(tmp_path / "open.h5")["configs"] == 12


def test_import_refuses_to_overwrite_and_refuses_hdf5(cache, tmp_path):
    kt = tmp_path / "kt.json"
    export_kt_json(str(cache), str(kt))
    with pytest.raises(UserError, match="exists"):
        import_kt(str(kt), str(cache))
    with pytest.raises(UserError, match="already an mpitune file"):
        import_kt(str(cache), str(tmp_path / "x.h5"))
    proc = offline("export", cache, "--format", "kt-json", "--out", tmp_path / "no" / "such" / "dir.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_real_kernel_tuner_cache_round_trip(tmp_path, pnpoly):
    h5 = tmp_path / "pnpoly.h5"
    import_kt(str(pnpoly), str(h5))
    original = load_measured(str(pnpoly))
    s = report_json(h5)
    assert s["configs"] == len(original.configs) == 4092
    assert s["ok"] == sum(m.status == "ok" for m in original.measurements)
    assert tuple(s["best"]["config"].values()) == best_of(original)

    out = tmp_path / "pnpoly.json"
    export_kt_json(str(h5), str(out))
    again = load_measured(str(out))
    assert sorted(again.configs) == sorted(original.configs)
    assert best_of(again) == best_of(original)
    mine, theirs = again.lookup(), original.lookup()
    for config, m in theirs.items():
        assert mine[config].status == m.status
        assert mine[config].time_ms == m.time_ms or (math.isnan(m.time_ms) and math.isnan(mine[config].time_ms))
    assert tuple(replay_in_kernel_tuner(out).values()) == best_of(original)


def test_a_cache_filled_in_two_sessions_becomes_two_runs(tmp_path, shared_caches):
    h5 = tmp_path / "gemm.h5"
    import_kt(str(shared_caches / "gemm_RTX_3090.json.gz"), str(h5))  # measured in two sessions a day apart
    with h5py.File(h5, "r") as f:
        runs, timeline = f["runs"][...], f["timeline"][...]
        assert len(f["results"]) == 17956
    assert len(runs) == 2 and runs["measured"].sum() == 17956
    assert {s.decode() for s in runs["strategy"]} == {"import"}
    # The day between the sessions is not counted; each session took a few hours.
    assert (runs["wall_s"] < 4 * 3600).all() and runs["started_unix"][1] - runs["started_unix"][0] > 12 * 3600
    # Kernel Tuner measured one configuration after another: one rank, never waiting.
    assert set(timeline["rank"]) == {0} and b"wait" not in set(timeline["phase"])
    for run in (0, 1):
        mine = np.sort(timeline[timeline["run"] == run], order="start_s")
        assert (mine["start_s"][1:] - mine["end_s"][:-1]).min() > -1e-9
        assert (mine["end_s"] - mine["start_s"]).sum() == pytest.approx(runs["wall_s"][run], rel=1e-6)


KT_SOURCE = r"""
#include <time.h>
#if MODE == 1
#error "MODE 1 uses too much shared data"
#endif
float scale(float *x, int n) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i += STEP) x[i] = x[i] * SCALE + 1.0f;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e3f + (b.tv_nsec - a.tv_nsec) * 1e-6f;
}
"""
# A 2 among floats, and a restriction: what a cache's keys and space must carry across.
KT_PARAMS = {"STEP": [2, 4], "MODE": [0, 1], "SCALE": [0.5, 1.0, 2]}
KT_RESTRICTIONS = ["STEP * SCALE < 8"]
KT_N = 20000


@pytest.fixture(scope="module")
def kt_run(tmp_path_factory):
    """Kernel Tuner 1.5.0 tunes a C kernel itself (its C backend: the function returns its own
    time in ms) and writes its cache: the 10 configurations its restriction leaves, the 5 of
    MODE 1 failing to compile in the words Kernel Tuner skips over. (results, cache path)."""
    tmp = tmp_path_factory.mktemp("kt_run")
    here = os.getcwd()
    os.chdir(tmp)  # Kernel Tuner writes its sources and objects in the working directory
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # that no parameter names a thread block dimension
            results, _ = kernel_tuner.tune_kernel(
                "scale",
                KT_SOURCE,
                KT_N,
                [np.zeros(KT_N, np.float32), np.int32(KT_N)],
                KT_PARAMS,
                restrictions=KT_RESTRICTIONS,
                lang="C",
                cache="kt.json",
                iterations=5,
                quiet=True,
            )
    finally:
        os.chdir(here)
    return results, tmp / "kt.json"


def kt_best(results: list[dict]) -> tuple:
    ok = [r for r in results if "__error__" not in r]
    return tuple(min(ok, key=lambda r: r["time"])[k] for k in KT_PARAMS)


def test_a_cache_kernel_tuner_wrote_imports_with_its_statuses_times_and_units(kt_run, tmp_path):
    """Kernel Tuner 1.5.0 writes a failure as ``"__error__": "CompilationFailedConfig"`` with no
    time (older releases put the marker in place of the time, as the shared caches do); the
    marker names the failure, so it is the status an import gives, not runtime_error for every
    ``__error__`` as mpitune gave before."""
    results, cache = kt_run
    doc = json.loads(cache.read_text())
    assert len(doc["cache"]) == len(results) == 10
    assert {e.get("__error__") for e in doc["cache"].values() if e["MODE"] == 1} == {"CompilationFailedConfig"}
    import_kt(str(cache), str(tmp_path / "kt.h5"))
    mine = load_measured(str(tmp_path / "kt.h5")).lookup()
    for entry in doc["cache"].values():
        m = mine[tuple(entry[k] for k in KT_PARAMS)]
        # Durations: ms in Kernel Tuner, s in mpitune.
        assert m.compile_s * 1e3 == pytest.approx(entry["compile_time"], rel=1e-9)
        if entry["MODE"] == 1:
            assert m.status == "compile_error", m
            continue
        assert m.status == "ok" and m.times_ms == pytest.approx(entry["times"], rel=1e-9)
        # Kernel Tuner's time is the mean of its times; the import keeps it, not the median,
        # so that a replay here ranks as Kernel Tuner ranked (its best stays its best).
        assert entry["time"] == pytest.approx(statistics.mean(entry["times"]), rel=1e-9)
        assert m.time_ms == pytest.approx(entry["time"], rel=1e-12)
    assert report_json(tmp_path / "kt.h5")["best"]["config"] == dict(zip(KT_PARAMS, kt_best(results)))


def test_kernel_tuner_replays_our_export_of_its_own_cache(kt_run, tmp_path):
    """The round trip Kernel Tuner -> import -> export -> Kernel Tuner: every configuration found
    under its key (a 2 among floats stays "2": Kernel Tuner keys by ``str()`` of the value its
    user wrote, mpitune wrote the "2.0" its float column read back before), the same failures,
    the same best. Restrictions are the user's to pass again: neither Kernel Tuner's cache
    format nor ours in it has a place for them, and Kernel Tuner is right to refuse a space
    with configurations that are neither measured nor excluded."""
    results, cache = kt_run
    import_kt(str(cache), str(tmp_path / "kt.h5"))
    out = tmp_path / "again.json"
    export_kt_json(str(tmp_path / "kt.h5"), str(out))
    original = json.loads(cache.read_text())["cache"]
    assert set(json.loads(out.read_text())["cache"]) == set(original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replayed, _ = kernel_tuner.tune_kernel(
            "scale", KT_SOURCE, KT_N, [np.zeros(1, np.float32)], KT_PARAMS, restrictions=KT_RESTRICTIONS,
            lang="C", cache=str(out), simulation_mode=True, quiet=True,
        )  # fmt: skip
        assert kt_best(replayed) == kt_best(results)
        assert [str(r.get("__error__", "")) for r in replayed] == [str(r.get("__error__", "")) for r in results]
        with pytest.raises(ValueError, match="not in cache"):
            kernel_tuner.tune_kernel(
                "scale", KT_SOURCE, KT_N, [np.zeros(1, np.float32)], KT_PARAMS,
                lang="C", cache=str(out), simulation_mode=True, quiet=True,
            )  # fmt: skip
