"""Names and values through a Kernel Tuner cache: what a spec accepts comes back from an export and
our own import as it was measured (every row, every status) and Kernel Tuner finds every
configuration under its key with the same outcome; what a Kernel Tuner cache cannot hold is
refused when the spec loads (tests/spec/test_hostile_values.py), and a file written before that
refusal is refused by the export in one line, never written with a row lost.

Real parts: a real mpitune run compiling with gcc, real HDF5 files, and the real ``kernel-tuner``
package (1.5.0, the test extra's pin) writing its own cache and replaying ours."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import info, mpi_env, mpitune, write_scale_spec

from mpitune.errors import UserError
from mpitune.model.identity import ProblemIdentity
from mpitune.model.result import Result
from mpitune.model.schema import RESERVED
from mpitune.model.searchspace import SearchSpace
from mpitune.offline.exchange import export_kt_json, export_t4
from mpitune.offline.kt_import import import_kt
from mpitune.store.cache import Cache
from mpitune.store.measured import load as load_measured

kernel_tuner = pytest.importorskip(
    "kernel_tuner", reason="needs kernel_tuner (the test extra): pip install -e '.[test]'"
)


def offline(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpitune", *map(str, args)], env=mpi_env(), capture_output=True, text=True, timeout=120
    )


def test_every_key_kernel_tuner_writes_beside_the_parameters_is_reserved(tmp_path):
    """The reserved names come from one declared list (model/schema.py); Kernel Tuner 1.5.0 itself
    says which keys an entry holds, for a configuration that ran and one that failed to compile."""
    source = '#if MODE == 1\n#error "MODE 1 uses too much shared data"\n#endif\nfloat k(float *x) { return 0.5f; }\n'
    here = os.getcwd()
    os.chdir(tmp_path)  # Kernel Tuner writes its sources and objects in the working directory
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # that no parameter names a thread block dimension
            kernel_tuner.tune_kernel(
                "k", source, 1, [np.zeros(1, np.float32)], {"MODE": [0, 1]}, lang="C", cache="kt.json", quiet=True
            )
    finally:
        os.chdir(here)
    entries = json.loads((tmp_path / "kt.json").read_text())["cache"].values()
    assert {"__error__" in e for e in entries} == {True, False}
    for entry in entries:
        assert set(entry) - {"MODE"} <= set(RESERVED), entry


HOSTILE = (
    '{"STEP": [2], "MODE": [0, 1, 2], "OP": ["max(a,b)", "a,b,c", ""], '
    '"Q": ["\\"q\\"", "é ü"], "F": [0.5, 2], "B": [True]}'
)
METRICS = 'metrics = {"work": lambda p: 2.0 * p["F"]}\nconfirm = False\n'


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """A real run of every value a spec accepts that a Kernel Tuner cache could get wrong: commas
    (in one parameter's values), quotes, text beyond ASCII, an empty text, a 2 among floats, a
    boolean; MODE 1 fails to compile, MODE 2 gives wrong answers; a metric."""
    tmp = tmp_path_factory.mktemp("hostile")
    spec = write_scale_spec(tmp, HOSTILE, extra=METRICS)
    proc = mpitune(1, [str(spec), "--cache", str(tmp / "run.h5")], tmp, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tmp / "run.h5"


def test_export_then_import_gives_back_every_row_and_status(hostile_run, tmp_path):
    kt, back = tmp_path / "kt.json", tmp_path / "back.h5"
    proc = offline("export", hostile_run, "--format", "kt-json", "--out", kt)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 36 configurations" in proc.stdout
    proc = offline("import", kt, "--out", back)
    assert proc.returncode == 0, proc.stderr
    run, again = load_measured(str(hostile_run)), load_measured(str(back))
    assert len(run.configs) == len(again.configs) == 36
    mine, theirs = run.lookup(), again.lookup()
    assert set(mine) == set(theirs)
    assert {m.status for m in mine.values()} == {"ok", "compile_error", "verify_failed"}
    for config, m in mine.items():
        assert theirs[config].status == m.status, config
        assert theirs[config].time_ms == m.time_ms or (math.isnan(m.time_ms) and math.isnan(theirs[config].time_ms))
        if m.status == "ok":
            assert theirs[config].observed["work"] == m.observed["work"]


def test_kernel_tuner_finds_every_configuration_of_the_export_with_its_outcome(hostile_run, tmp_path):
    """Kernel Tuner keys by ``str()`` of each value joined with commas and reads its error markers
    under any key: every configuration is found (it refuses a space with one missing), and the
    ones that passed here pass there."""
    out = tmp_path / "kt.json"
    assert export_kt_json(str(hostile_run), str(out)) == 36
    doc = json.loads(out.read_text())
    tune_params = {k: doc["tune_params"][k] for k in doc["tune_params_keys"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # about the placeholder argument, which it never runs
        results, _ = kernel_tuner.tune_kernel(
            "scale", "void scale() {}", doc["problem_size"], [np.zeros(1, np.float32)], tune_params,
            cache=str(out), simulation_mode=True, strategy="brute_force", quiet=True, lang="C",
        )  # fmt: skip
    assert len(results) == 36
    ours = load_measured(str(hostile_run)).lookup()
    for r in results:
        passed = ours[tuple(r[k] for k in tune_params)].status == "ok"
        assert ("__error__" not in r) == passed, r


def legacy_file(path: Path, tune_params: dict[str, list]) -> Path:
    """A file as a run wrote it before the spec refused such names and values: every
    configuration measured, ok."""
    identity = ProblemIdentity(
        kernel_name="k",
        kernel_source="",
        lang="C",
        problem_size=(1,),
        arguments=(),
        tune_params={k: tuple(v) for k, v in tune_params.items()},
        restrictions=(),
        iterations=2,
    )
    space = SearchSpace.build(tune_params)
    cache = Cache(str(path), identity, tune_params, iterations=2)
    cache.start_run(info(ranks=1, space_size=len(space)), ["h"], ["d"], [1])
    scored = []
    for cid in range(len(space)):
        result = Result(cid, "ok", time_ms=1.0 + cid, times_ms=(1.0 + cid, 1.0 + cid), compile_s=0.1, rank=0, batch=0)
        scored.append(cache.objective.evaluate(result, space.config(cid)))
    cache.append(scored, [])
    cache.finish_run(1.0, "finished", len(space))
    cache.close()
    return path


@pytest.mark.parametrize(
    "params,phrase",
    [
        ({"x": [1, 2], "time": [3]}, "'time' is the name of a key Kernel Tuner writes in every cache entry"),
        ({"x": [1], "__error__": [0]}, "'__error__' is the name of a key Kernel Tuner writes"),
        ({"A": ["a,b", "a"], "B": ["c", "b,c"]}, "share Kernel Tuner's cache key 'a,b,c'; --format t4 keeps both"),
        ({"S": ["InvalidConfig", "c"]}, "'S' has the value 'InvalidConfig', which Kernel Tuner reads as a failure"),
    ],
    ids=["time", "error", "commas", "marker"],
)
def test_an_older_file_kernel_tuner_cannot_hold_is_refused_in_one_line(tmp_path, params, phrase):
    """Before, the export wrote such a file: "wrote 3 configurations" of 4 for the commas, ``time``
    overwritten by the time, every configuration a failure under ``__error__``."""
    h5 = legacy_file(tmp_path / "old.h5", params)
    out = tmp_path / "kt.json"
    proc = offline("export", h5, "--format", "kt-json", "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("mpitune: error: ") and phrase in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    # T4 keeps each configuration as an object of its own: every row, under its own names.
    rows = len(SearchSpace.build(params))
    assert export_t4(str(h5), str(tmp_path / "t4.json")) == rows
    configurations = [r["configuration"] for r in json.loads((tmp_path / "t4.json").read_text())["results"]]
    assert len({json.dumps(c, sort_keys=True) for c in configurations}) == rows


def test_import_refuses_a_kernel_tuner_cache_whose_parameter_has_one_of_its_own_keys(tmp_path):
    """Kernel Tuner itself would have written its own strategy_time over the parameter's value."""
    entry = {"x": 1, "strategy_time": 5, "time": 1.0, "times": [1.0]}
    params = {"x": [1], "strategy_time": [5]}
    kt = tmp_path / "kt.json"
    kt.write_text(
        json.dumps(
            {"kernel_name": "k", "tune_params_keys": list(params), "tune_params": params, "cache": {"1,5": entry}}
        )
    )
    with pytest.raises(UserError, match="parameter 'strategy_time': the name is reserved"):
        import_kt(str(kt), str(tmp_path / "x.h5"))
