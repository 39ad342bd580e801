"""``report FILE FILE ...``: one kernel's files of several device models side by side
(offline/across_models.py), on real HDF5 files imported from Kernel Tuner caches written here,
with every figure worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import mpi_env

from mpitune.offline.kt_import import import_kt

# (x, y) -> time in ms on each model; a string is a failure as Kernel Tuner records it.
A = {(1, 1): 2.0, (1, 2): 1.0, (2, 1): 1.5, (2, 2): 3.0, (3, 1): 0.9}
B = {(1, 1): 1.0, (1, 2): 4.0, (2, 1): 1.2, (2, 2): "RuntimeFailedConfig"}  # (3, 1) never measured


def kt_file(path, device, times, kernel="k"):
    cache = {}
    for (x, y), t in times.items():
        entry = {"x": x, "y": y, "time": t, "compile_time": 10.0}
        if not isinstance(t, str):
            entry["times"] = [t, t, t]
        cache[f"{x},{y}"] = entry
    doc = {
        "device_name": device,
        "kernel_name": kernel,
        "problem_size": [64],
        "tune_params_keys": ["x", "y"],
        "tune_params": {"x": [1, 2, 3], "y": [1, 2]},
        "objective": "time",
        "cache": cache,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    out = {}
    for name, device, times, kernel in (("a", "GPU A", A, "k"), ("b", "GPU B", B, "k"), ("c", "GPU A", B, "k")):
        import_kt(str(kt_file(tmp / f"{name}.json", device, times, kernel)), str(tmp / f"{name}.h5"))
        out[name] = tmp / f"{name}.h5"
    import_kt(str(kt_file(tmp / "other.json", "GPU C", B, "other_kernel")), str(tmp / "other.h5"))
    out["other"] = tmp / "other.h5"
    return out


def report(*args):
    return subprocess.run(
        [sys.executable, "-m", "mpitune", "report", *map(str, args)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_models_best_how_it_runs_elsewhere_and_the_portable_choice(files):
    proc = report(files["a"], files["b"], "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    a, b = got["models"]
    assert (a["device"], a["config"], a["value"], a["confirmed"]) == ("GPU A", {"x": 3, "y": 1}, 0.9, False)
    assert a["on_models"] == {"GPU A": 1.0, "GPU B": None}  # B never measured it
    assert (b["device"], b["config"], b["value"]) == ("GPU B", {"x": 1, "y": 1}, 1.0)
    assert b["on_models"]["GPU A"] == pytest.approx(2.0 / 0.9) and b["on_models"]["GPU B"] == 1.0
    # Passed on both: (1,1), (1,2), (2,1) ((2,2) failed on B); worst ratios 2.22, 4.0, 1.67.
    assert got["portable_config"] == {"x": 2, "y": 1} and got["common"] == 3
    assert got["portable_worst"] == pytest.approx(1.5 / 0.9)
    assert got["portable_ratios"] == pytest.approx({"GPU A": 1.5 / 0.9, "GPU B": 1.2})
    text = report(files["a"], files["b"]).stdout
    assert "on GPU B: not measured" in text and "worst ratio 1.667" in text
    assert "the best model's own winner used everywhere: worst ratio 2.222" in text


def test_files_that_do_not_compare_are_refused_in_one_line(files):
    for args, says in (
        ((files["a"], files["c"]), "GPU A again"),
        ((files["a"], files["other"]), "kernel 'other_kernel', not 'k'"),
    ):
        proc = report(*args)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
