"""mpitune.tune_kernel for real: scripts that call it, as a user's would, tuning a C kernel with
gcc on one rank (this process) and on two (an MPI job it starts), into real HDF5 files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from conftest import SCALE_C, heavy_imports, mpi_env, report_json, scale_prior

import mpitune
from mpitune.api import job
from mpitune.api.names import spec_names
from mpitune.api.tune import ORIGIN
from mpitune.errors import SpecError
from mpitune.model.problem import Schedule
from mpitune.spec.load import load_names, load_spec
from mpitune.spec.settings import Overrides

# y = 2 * x; MODE 1 does not compile and MODE 2 computes 3 * x (a wrong answer).
PROBLEM = """
import json
import numpy as np
from mpitune import tune_kernel

n = 4096
x = np.arange(n, dtype=np.float32)
args = ("scale", "scale.c", n, [np.zeros(n, np.float32), x, np.int32(n)],
        {"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]})
common = dict(lang="C", answer=[2 * x, None, None], iterations=3, restrictions=["STEP < 8 or MODE == 0"])
"""


def run_script(directory: Path, body: str) -> list:
    """Run PROBLEM + body as a script in ``directory``; what it prints with ``out(...)``."""
    (directory / "scale.c").write_text(SCALE_C)
    script = directory / "script.py"
    script.write_text(
        PROBLEM + "def out(*values):\n    print('OUT ' + json.dumps(values, default=str))\n" + textwrap.dedent(body)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=directory, env=mpi_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("OUT ")]


def outcome(results: list[dict]) -> set:
    return {(r["STEP"], r["MODE"], r["status"], r["time"] if isinstance(r["time"], str) else "ms") for r in results}


def test_one_rank_and_two_ranks_give_the_same_results(tmp_path):
    started = datetime.now(timezone.utc)
    ((one, env1),) = run_script(
        tmp_path,
        """
        results, env = tune_kernel(*args, **common, metrics={"GB/s": lambda p: 8 * n / 1e6 / p["time"]}, racing=False)
        out(results, env)
    """,
    )
    ((two, env2),) = run_script(
        tmp_path,
        """
        results, env = tune_kernel(*args, **common, metrics={"GB/s": f"8 * {n} / 1e6 / time"}, ranks=2, racing=False)
        out(results, env)
    """,
    )
    ended = datetime.now(timezone.utc)
    assert len(one) == len(two) == 10
    assert outcome(one) == outcome(two)
    assert {(s, m) for s, m, status, _ in outcome(one) if status == "ok"} == {(1, 0), (2, 0), (4, 0), (8, 0)}
    for results in (one, two):
        for r in results:
            assert r["status"] in ("ok", "compile_error", "verify_failed")
            # Every configuration is compiled (those that fail to, too), during the test.
            assert r["compile_time"] > 0 and started <= datetime.fromisoformat(r["timestamp"]) <= ended
            if r["status"] == "ok":
                assert len(r["times"]) == 3 and r["time"] == sorted(r["times"])[1]
                assert r["GB/s"] == pytest.approx(8 * 4096 / 1e6 / r["time"])
                assert "error" not in r
            else:
                assert r["time"] == {"compile_error": "CompilationFailedConfig"}.get(r["status"], "RuntimeFailedConfig")
                assert r["error"] and "times" not in r and "GB/s" not in r
    assert (env1["ranks"], env2["ranks"]) == (1, 2)
    for env in (env1, env2):
        assert env["stop_reason"] == "finished" and env["measured"] == 10 and env["cache"] == ""
        assert env["best_config"]["status"] == "ok" and env["kernel_name"] == "scale"
        assert env["total_compile_time"] > 0 and env["overhead_time"] >= env["total_benchmark_time"]


def test_a_cache_resumes_and_measures_nothing_again(tmp_path):
    (first, env1), (second, env2) = run_script(
        tmp_path,
        """
        for _ in range(2):
            results, env = tune_kernel(*args, **common, cache="out.h5")
            out(results, env)
    """,
    )
    assert env1["measured"] == 10 and env2["measured"] == 0
    assert env1["cache"] == env2["cache"] == str(tmp_path / "out.h5")
    assert first == second  # the same rows, times included, read back from the file


def test_a_prior_starts_the_search_and_the_file_records_it(tmp_path):
    scale_prior(tmp_path / "prior.json")
    scale_prior(tmp_path / "other.json", kernel_name="other")
    ((measured, refused),) = run_script(
        tmp_path,
        """
        _, env = tune_kernel(*args, **common, prior=["prior.json"], cache="out.h5", strategy_options={"max_fevals": 3})
        try:
            tune_kernel(*args, **common, prior="other.json", strategy_options={"max_fevals": 3})
        except Exception as exc:
            out(env["measured"], f"{type(exc).__name__}: {exc}")
    """,
    )
    assert measured == 3
    why = "measured kernel 'other', not 'scale' (prior_any_kernel = True, or --prior-any-kernel, takes it all the same)"
    assert refused == f"UserError: tune_kernel: prior: {tmp_path / 'other.json'} {why}"
    [prior] = report_json(tmp_path / "out.h5")["prior"]
    # STEP 1, 2 and 4 with each MODE: 9 of the 10 configurations (8 is this space's alone).
    assert (prior["path"], prior["device"], prior["shared"], prior["matched"]) == (
        str(tmp_path / "prior.json"),
        "Other CPU",
        ["STEP"],
        9,
    )


def test_errors_of_the_run_are_raised(tmp_path):
    ((one, two),) = run_script(
        tmp_path,
        """
        messages = []
        for ranks in (1, 2):
            try:
                tune_kernel(*args, **{**common, "restrictions": ["STEP > 100"]}, ranks=ranks)
            except Exception as exc:
                messages.append(f"{type(exc).__name__}: {exc}")
        out(*messages)
    """,
    )
    expected = "UserError: tune_kernel: restrictions: no configuration satisfies the restrictions"
    assert one == two == expected


def args(**keywords):
    x = np.arange(16, dtype=np.float32)
    return (
        ("scale", SCALE_C, 16, [np.zeros(16, np.float32), x, np.int32(16)], {"STEP": [1, 2], "MODE": [0]}),
        {"lang": "C", **keywords},
    )


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"iteration": 3}, "tune_kernel: iteration: unknown keyword argument; did you mean 'iterations'?"),
        ({"colour": "red"}, "tune_kernel: colour: unknown keyword argument"),
        ({"verify": print}, "tune_kernel: verify: is a Kernel Tuner argument that mpitune does not support yet"),
        ({"atol": "small"}, "tune_kernel: atol: must be a number, got str 'small'"),
        ({"ranks": 0}, "tune_kernel: ranks: must be a whole number of ranks, at least 1, got 0"),
        ({"cache": "kt.json"}, "tune_kernel: cache: 'kt.json' is a Kernel Tuner JSON cache"),
        ({"schedule": "eager"}, "tune_kernel: schedule: must be one of 'auto', 'batches', 'refill', got 'eager'"),
        ({"devices": "many"}, "tune_kernel: devices: must be one of 'one', 'each', got 'many'"),
        ({"ranks": 2, "devices": "each"}, "tune_kernel: devices: tune_kernel returns one device model's results"),
        (
            {"ranks": 2, "metrics": {"GB/s": lambda p: 1.0}},
            "tune_kernel: metrics: metrics['GB/s'] is a function, which cannot be sent to the ranks of an MPI job",
        ),
        ({"ranks": 2, "restrictions": ["STEP > 0", lambda p: True]}, "tune_kernel: restrictions: restrictions[1] is"),
    ],
)
def test_a_bad_argument_is_one_error_naming_it(keywords, message):
    positional, keywords = args(**keywords)
    with pytest.raises(SpecError) as error:
        mpitune.tune_kernel(*positional, **keywords)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_the_schedule_reaches_the_run_settings_here_and_in_a_job_s_spec(tmp_path, schedule):
    """As ``tune_kernel`` loads its keywords for one rank, and as the job of several loads the
    spec it writes of them."""
    positional, keywords = args(schedule=schedule.value)
    names = spec_names(*positional, keywords)
    here = Overrides(cache_path=str(tmp_path / "out.h5"))
    problem, settings = load_names(names, ORIGIN, str(tmp_path), here, strict=True)
    assert settings.schedule is schedule
    spec = job.write_spec(str(tmp_path), names, problem, ORIGIN)
    assert load_spec(spec)[1].schedule is schedule


def test_the_api_imports_neither_mpi_nor_cupy():
    # It reads its results file, so h5py may come; MPI starts only with a run, CuPy with a GPU backend.
    assert not {"mpi4py", "cupy"} & set(heavy_imports("import mpitune; mpitune.tune_kernel, mpitune.run_kernel"))


@pytest.mark.parametrize("ranks", [1, 2])
def test_simulation_mode_replays_a_kernel_tuner_cache(tmp_path, ranks):
    """As in Kernel Tuner: ``cache`` names the measured data, nothing is compiled or run."""
    from conftest import kt_cache

    kt_cache(tmp_path / "kt.json")
    ((results, env),) = run_script(
        tmp_path,
        f"""
        results, env = tune_kernel("k", "", (64, 64), [], {{"x": [1, 2, 3], "y": [1, 2]}}, simulation_mode=True,
                                   cache="kt.json", strategy="brute_force", ranks={ranks})
        out(results, env)
    """,
    )
    ok = {(r["x"], r["y"]): r["time"] for r in results if r["status"] == "ok"}
    assert ok == {(1, 1): 2.0, (1, 2): 1.0}
    assert len(results) == 6 and env["best_config"]["y"] == 2 and env["cache"] == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kt.json", "scale.c", "script.py"]


def test_env_holds_the_confirmation_and_the_device_factors(tmp_path):
    """Two configurations within noise of each other, replayed on two ranks: the run confirms
    them, and ``env`` says what ``report --json`` says of it."""
    times = {1: [1.00, 1.01, 0.99, 1.02, 0.98], 2: [1.005, 1.0, 1.01, 0.995, 1.015], 3: [3.0] * 5}
    cache = {
        f"{x}": {"x": x, "time": float(np.median(t)), "times": t, "compile_time": 10.0, "benchmark_time": 5.0}
        for x, t in times.items()
    }
    head = {"device_name": "d", "kernel_name": "k", "problem_size": [64], "tune_params_keys": ["x"]}
    (tmp_path / "kt.json").write_text(
        json.dumps({**head, "tune_params": {"x": [1, 2, 3]}, "objective": "time", "cache": cache})
    )
    ((results, env),) = run_script(
        tmp_path,
        """
        results, env = tune_kernel("k", "", 64, [], {"x": [1, 2, 3]}, simulation_mode=True, cache="kt.json",
                                   strategy="brute_force", ranks=2)
        out(results, env)
    """,
    )
    assert len(results) == 3 and sorted(r["x"] for r in results) == [1, 2, 3]
    confirmation = env["confirmation"]
    assert list(confirmation) == ["winner", "winner_ms", "ci_ms", "tied"]
    assert {confirmation["winner"]["x"], *(t["x"] for t in confirmation["tied"])} <= {1, 2}
    assert confirmation["ci_ms"][0] <= confirmation["winner_ms"] <= confirmation["ci_ms"][1]
    assert env["confirmation_time"] > 0
    assert [c["rank"] for c in env["calibration"]] == [0, 1]
    assert all(abs(c["factor"] - 1) < 0.05 and not c["flagged"] for c in env["calibration"])
