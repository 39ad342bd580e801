"""Class 8: hostile Kernel Tuner JSON on import and replay. Each case is either refused with one
line naming the entry or field (exit 2, no traceback, quickly), or imported so faithfully that
report, check and replay all work on the result."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import mpi_env, mpitune

HEAD = {"device_name": "Test GPU", "kernel_name": "k", "problem_size": [64], "objective": "time"}
GOOD = {"x": 1, "y": 1, "time": 2.0, "times": [2.0, 2.0], "compile_time": 10.0}


def doc(tune_params=None, cache=None, **head) -> dict:
    tune_params = {"x": [1, 2], "y": [1]} if tune_params is None else tune_params
    cache = {"1,1": GOOD, "2,1": {**GOOD, "x": 2, "time": 1.0}} if cache is None else cache
    return {
        **HEAD,
        "tune_params_keys": list(tune_params) if isinstance(tune_params, dict) else [],
        "tune_params": tune_params,
        "cache": cache,
        **head,
    }


# name -> (document or raw text, words the one line must hold)
REFUSED = {
    "missing_parameter": (doc(cache={"1,1": {"x": 1, "time": 1.0}}), "entry '1,1': has no value for parameter 'y'"),
    "values_not_a_list": (
        doc(tune_params={"x": 3, "y": [1]}, cache={"3,1": {**GOOD, "x": 3}}),
        "parameter 'x': must be a non-empty list",
    ),
    "values_a_string": (doc(tune_params={"x": "12", "y": [1]}), "parameter 'x': must be a non-empty list"),
    "value_past_int64": (
        doc(tune_params={"x": [1, 2**63], "y": [1]}, cache={"1,1": GOOD}),
        "parameter 'x': value 9223372036854775808, outside the 64-bit integers results are kept as",
    ),
    "value_huge": (doc(tune_params={"x": [-(10**400)], "y": [1]}, cache={}), "value -2**1328 or more, outside the 64"),
    "entry_a_list": (doc(cache={"1,1": [1, 1, 2.0]}), "entry '1,1': must be an object"),
    "cache_a_list": (doc(cache=[GOOD]), "cache: must be an object"),
    "time_a_list": (doc(cache={"1,1": {**GOOD, "time": [1.0]}}), "entry '1,1': time is [1.0], not a number"),
    "time_true": (doc(cache={"1,1": {**GOOD, "time": True}}), "entry '1,1': time is True"),
    "compile_time_text": (doc(cache={"1,1": {**GOOD, "compile_time": "slow"}}), "compile_time is 'slow'"),
    "times_text": (doc(cache={"1,1": {**GOOD, "times": "fast"}}), "times must be a list"),
    "name_status": (
        doc(tune_params={"status": [1], "y": [1]}, cache={"1,1": {**GOOD, "status": 1}}),
        "parameter 'status': the name is reserved",
    ),
    "name_time_ms": (
        doc(tune_params={"time_ms": [1], "y": [1]}, cache={"1,1": {**GOOD, "time_ms": 1}}),
        "parameter 'time_ms': the name is reserved",
    ),
    "name_config_id": (
        doc(tune_params={"config_id": [1], "y": [1]}, cache={"1,1": {**GOOD, "config_id": 1}}),
        "parameter 'config_id': the name is reserved",
    ),
    "name_empty": (doc(tune_params={"": [1], "y": [1]}, cache={"1,1": {**GOOD, "": 1}}), "must be an identifier"),
    "name_not_identifier": (
        doc(tune_params={"block size": [1], "y": [1]}, cache={"1,1": {**GOOD, "block size": 1}}),
        "must be an identifier",
    ),
    "name_very_long": (
        doc(tune_params={"x" * 5000: [1], "y": [1]}, cache={"1,1": {**GOOD, "x" * 5000: 1}}),
        "must be an identifier of at most 64",
    ),
    "keys_not_names": (doc(tune_params_keys=[1, 2]), "tune_params_keys: must list the names"),
    "mixed_text_and_numbers": (doc(tune_params={"x": [1, "1"], "y": [1]}), "mixes strings and numbers"),
    "mixed_repeats": (doc(tune_params={"x": [1, 1.0, True], "y": [1]}), "lists the value 1 twice"),
    "null_value": (doc(tune_params={"x": [1, None], "y": [1]}), "value None: values must be finite numbers"),
    "entry_value_of_another_kind": (doc(cache={"1,1": {**GOOD, "x": "1"}}), "parameter 'x' is '1'"),
    "entry_value_null": (doc(cache={"1,1": {**GOOD, "x": None}}), "parameter 'x' is None"),
    "same_configuration_twice": (doc(cache={"a": GOOD, "b": GOOD}), "entry 'b': the same configuration as entry 'a'"),
    "very_deep_nesting": (
        '{"tune_params": {"x": [1]}, "cache": ' + "[" * 100000 + "]" * 100000 + "}",
        "nested too deeply",
    ),
}

# Odd but meaningful: imported faithfully, and every verb works on the result.
FAITHFUL = {
    "ints_and_floats": doc(
        tune_params={"x": [1, 2.5], "y": [1]}, cache={"1,1": GOOD, "2.5,1": {**GOOD, "x": 2.5, "time": 1.0}}
    ),
    "text_values": doc(
        tune_params={"x": ["a", "b"], "y": [1]},
        cache={"a,1": {**GOOD, "x": "a"}, "b,1": {**GOOD, "x": "b", "time": "RuntimeFailedConfig"}},
    ),
    "value_beyond_the_header": doc(cache={"1,1": GOOD, "7,1": {**GOOD, "x": 7, "time": 1.5}}),
    "unknown_marker_and_null_time": doc(
        cache={"1,1": {**GOOD, "time": "SomethingElse"}, "2,1": {**GOOD, "x": 2, "time": None}}
    ),
}


def write(tmp_path: Path, content) -> Path:
    path = tmp_path / "kt.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def offline(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", *args], cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=60
    )
    return proc, time.monotonic() - started


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_hostile_cache_is_refused_with_one_line_by_import_and_replay(tmp_path, case):
    content, words = REFUSED[case]
    kt = write(tmp_path, content)
    proc, took = offline(["import", str(kt), "--out", "x.h5"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr, proc.stderr
    assert took < 10
    assert not (tmp_path / "x.h5").exists()  # nothing half-made left behind
    replay = mpitune(1, ["replay", str(kt), "--output", str(tmp_path / "r.h5")], tmp_path, timeout=60)
    assert replay.returncode == 2, replay.stdout + replay.stderr
    assert "Traceback" not in replay.stderr and words in replay.stderr, replay.stderr


@pytest.mark.parametrize("case", sorted(FAITHFUL))
def test_odd_cache_imports_and_every_verb_works_on_it(tmp_path, case):
    kt = write(tmp_path, FAITHFUL[case])
    rows = len(FAITHFUL[case]["cache"])
    proc, took = offline(["import", str(kt), "--out", "x.h5"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert took < 10
    for verb in (
        ["report", "x.h5"],
        ["report", "x.h5", "--json"],
        ["check", "x.h5", "--no-repair"],
        ["export", "x.h5", "--format", "kt-json", "--out", "back.json"],
    ):
        done, _ = offline(verb, tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (verb, done.stdout, done.stderr)
    check, _ = offline(["check", "x.h5", "--no-repair"], tmp_path)
    assert f"{rows} configurations recorded, sound" in check.stdout
    for source in ("x.h5", str(kt)):
        replay = mpitune(1, ["replay", source, "--output", str(tmp_path / "r.h5")], tmp_path, timeout=60)
        assert replay.returncode == 0 and "Traceback" not in replay.stderr, replay.stdout + replay.stderr
        (tmp_path / "r.h5").unlink()
