"""Kernel Tuner's integration: ``mpitune.store_results``, ``TuneResults``, ``create_device_targets``
and ``export --format kt-results|header``, on the files of real runs (real mpiexec, real gcc, real
HDF5), with the headers compiled by gcc and run, and Kernel Tuner 1.5.0 itself reading our results
files and writing its own for us to read (those tests skip without it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import SCALE_C, kt_cache, mpi_env, mpitune, report_json, write_scale_spec

import mpitune as api
from mpitune.offline.kt_import import import_kt

SCALE_PARAMS = '{"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]}'
SMALL = """
n = 1024
x = np.arange(n, dtype=np.float32)
arguments = [np.zeros(n, np.float32), x, np.int32(n)]
answer = [2 * x, None, None]
problem_size = n
confirm = False
"""


def offline(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpitune", *map(str, args)], env=mpi_env(), capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def tuned(run_with_failures, tmp_path_factory) -> dict[str, Path]:
    """Three real files of ``scale``: ``confirmed`` (2 ranks, problem size 1, a confirmation),
    ``small`` (1 rank, problem size 1024, no confirmation) on this CPU, and ``replayed``, a replay
    of the first on 2 ranks, whose device is that CPU "(replayed)"; and ``other``, a Kernel Tuner
    cache of another kernel imported."""
    tmp = tmp_path_factory.mktemp("integration")
    spec = write_scale_spec(tmp, SCALE_PARAMS, extra=SMALL)
    proc = mpitune(1, [str(spec), "--out", str(tmp / "small.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    proc = mpitune(2, ["replay", str(run_with_failures), "--out", str(tmp / "replayed.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    import_kt(str(kt_cache(tmp / "k.json")), str(tmp / "other.h5"))
    return {
        "confirmed": run_with_failures,
        "small": tmp / "small.h5",
        "replayed": tmp / "replayed.h5",
        "other": tmp / "other.h5",
    }


@pytest.fixture(scope="module")
def exported(tuned, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exported") / "results.json"
    proc = offline(
        "export", tuned["confirmed"], tuned["small"], tuned["replayed"], "--format", "kt-results", "--out", out
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.strip()
        == f"mpitune: wrote {len(json.loads(out.read_text())['data'])} entries to {out} (kt-results)"
    )
    return out


def kt_label(device: str) -> str:
    """A device's name as Kernel Tuner's results file keeps it."""
    return re.sub("[^0-9a-zA-Z]+", "_", device.strip())


def device_rule(doc: dict, device: str) -> dict:
    """Kernel Tuner's choice for a device across its problem sizes, computed here on its own: of
    the configurations kept for most sizes, the one with the smallest sum of times."""
    counts: dict[str, int] = {}
    sums: dict[str, float] = {}
    for e in doc["data"]:
        if e["device_name"] == device:
            key = json.dumps(e["tunable_parameters"])
            counts[key] = counts.get(key, 0) + 1
            sums[key] = sums.get(key, 0.0) + e["time"]
    most = max(counts.values())
    return json.loads(min((k for k in counts if counts[k] == most), key=lambda k: sums[k]))


def documented_default(doc: dict) -> dict | None:
    """docs/analysis.md's default: among the configurations kept for every (device, problem size),
    the one whose worst ratio of its time to the block's best is smallest; else the first device's."""
    blocks: dict[tuple, dict[str, float]] = {}
    for e in doc["data"]:
        blocks.setdefault((e["device_name"], e["problem_size"]), {})[json.dumps(e["tunable_parameters"])] = e["time"]
    common = set.intersection(*(set(b) for b in blocks.values()))
    if not common:
        return None
    worst = {c: max(b[c] / min(b.values()) for b in blocks.values()) for c in common}
    return json.loads(min(sorted(worst), key=lambda c: worst[c]))


def test_kt_results_export_keeps_the_confirmed_winner_and_the_top_of_a_search(tuned, exported):
    doc = json.loads(exported.read_text())
    assert (doc["version_number"], doc["kernel_name"], doc["objective"]) == ("1.0", "scale", "time")
    assert doc["tunable_parameters"] == ["STEP", "MODE"] and doc["objective_higher_is_better"] is False
    blocks: dict[tuple, list] = {}
    for entry in doc["data"]:
        blocks.setdefault((entry["device_name"], entry["problem_size"], entry["mpitune_source"]), []).append(entry)
    device = report_json(tuned["confirmed"])["devices"][0]["device"]
    cpu = kt_label(device)
    assert list(blocks) == [(cpu, "1", "out.h5"), (cpu, "1024", "small.h5"), (f"{cpu}_replayed_", "1", "replayed.h5")]
    keys = list(blocks)
    for key, path in ((keys[0], tuned["confirmed"]), (keys[2], tuned["replayed"])):
        confirmation = report_json(path)["confirmation"]
        (winner,) = blocks[key]  # the confirmed winner alone: Kernel Tuner's rules name it
        assert winner["tunable_parameters"] == confirmation["winner"] and winner["mpitune_confirmed"] is True
        assert winner["time"] == pytest.approx(confirmation["winner_ms"], rel=1e-12)
        assert winner["mpitune_ci_ms"] == pytest.approx(confirmation["ci_ms"], rel=1e-12)
        assert winner.get("mpitune_tied", []) == confirmation["tied"]
    small = blocks[keys[1]]
    best = report_json(tuned["small"])["best"]
    assert small[0]["tunable_parameters"] == best["config"] and small[0]["time"] == pytest.approx(best["time_ms"])
    assert all(e["time"] <= small[0]["time"] * 1.03 and "mpitune_confirmed" not in e for e in small)
    assert all(lo <= e["time"] <= hi for e in small for lo, hi in [e["mpitune_ci_ms"]])
    assert {e["tunable_parameters"]["MODE"] for e in small} == {0}  # failures never kept


def test_tune_results_name_each_device_and_size(tuned, exported):
    doc = json.loads(exported.read_text())
    results = api.TuneResults(str(exported))
    assert results.objective == "time" and results.data == doc["data"]
    first = doc["data"][0]
    cpu = first["device_name"]
    winner = first["tunable_parameters"]
    assert results.get_best_config(cpu, 1) == winner
    replayed = next(e for e in doc["data"] if e["mpitune_source"] == "replayed.h5")
    device = report_json(tuned["replayed"])["devices"][0]["device"]  # "... (replayed)", as env names it
    assert results.get_best_config(device, 1) == replayed["tunable_parameters"]
    small = [e for e in doc["data"] if e["problem_size"] == "1024"]
    assert results.get_best_config(cpu.replace("_", " "), [1024]) == small[0]["tunable_parameters"]
    # Across the device's sizes: the configuration kept for both, else the best sum (Kernel Tuner's rule).
    both = [e["tunable_parameters"] for e in small if e["tunable_parameters"] == winner]
    assert results.get_best_config(cpu) == (both[0] if both else device_rule(doc, cpu))
    if not both:  # which one wins the sum depends on this machine's times; the rule does not
        assert device_rule(doc, cpu) in [winner, *(e["tunable_parameters"] for e in small)]


def compile_and_print(header: Path, tmp: Path, *flags: str) -> str:
    """What a C program that includes ``header`` and prints its macros prints, compiled with ``flags``."""
    main = tmp / "main.c"
    main.write_text(
        textwrap.dedent(f"""\
        #include <stdio.h>
        #include "{header.name}"
        int main(void) {{
        #if defined(STEP) && defined(MODE)
            printf("STEP=%d MODE=%d\\n", STEP, MODE);
        #else
            printf("none\\n");
        #endif
            return 0;
        }}
        """)
    )
    exe = tmp / "main"
    built = subprocess.run(
        ["gcc", "-Wall", "-Werror", "-I", str(header.parent), *flags, str(main), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()


def test_header_gives_each_target_its_configuration_and_a_default(tuned, exported, tmp_path):
    header = tmp_path / "scale_targets.h"
    proc = offline(
        "export", tuned["confirmed"], tuned["small"], tuned["replayed"], "--format", "header", "--out", header
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"mpitune: wrote 2 device target(s) to {header} (header)"
    text = header.read_text()
    results = api.TuneResults(str(exported))
    devices = list(dict.fromkeys(e["device_name"] for e in results.data))
    for device in devices:
        assert f"defined(TARGET_{device})" in text
        want = results.get_best_config(device)
        assert compile_and_print(header, tmp_path, f"-DTARGET_{device}") == f"STEP={want['STEP']} MODE={want['MODE']}"
        # The target defined empty (or 0) picks its block all the same: defined(), not #elif TARGET_x.
        assert compile_and_print(header, tmp_path, f"-DTARGET_{device}=") == f"STEP={want['STEP']} MODE={want['MODE']}"
    doc = json.loads(exported.read_text())
    default = documented_default(doc) or results.get_best_config(devices[0])
    assert compile_and_print(header, tmp_path) == f"STEP={default['STEP']} MODE={default['MODE']}"
    assert (
        compile_and_print(header, tmp_path, "-DTARGET_NO_SUCH_GPU") == f"STEP={default['STEP']} MODE={default['MODE']}"
    )
    assert compile_and_print(header, tmp_path, f"-DTARGET_{devices[0]}", "-Dkernel_tuner") == "none"
    # Each block says where it came from, and with what it was tied.
    for entry in results.data:
        where = f"/* {entry['device_name']}, problem size {entry['problem_size']}, from {entry['mpitune_source']}: "
        assert where in text
        line = next(line for line in text.splitlines() if line.startswith(where))
        if entry["tunable_parameters"] != device_rule(doc, entry["device_name"]):
            # The device's block holds another size's choice; this size's comment says it kept it not.
            assert "not among the" in line or "confirmed winner" not in line
        elif entry.get("mpitune_confirmed"):
            tied = "; ".join(", ".join(f"{k}={v}" for k, v in t.items()) for t in entry.get("mpitune_tied", []))
            assert "confirmed winner" in line and (
                f"tied with it ({len(entry['mpitune_tied'])}): {tied}" in line if tied else "no candidate tied" in line
            )
    assert "/* default: " in text


TUNE = """
import json, sys
import numpy as np
from mpitune import tune_kernel

n = 4096
x = np.arange(n, dtype=np.float32)
results, env = tune_kernel(
    "scale", "scale.c", n, [np.zeros(n, np.float32), x, np.int32(n)], {"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]},
    lang="C", answer=[2 * x, None, None], iterations=3, cache="scale.h5", racing=False,
)
json.dump([results, env], sys.stdout)
"""


@pytest.fixture(scope="module")
def tune_kernel_results(tmp_path_factory) -> tuple[list, dict]:
    """``mpitune.tune_kernel``'s (results, env) of a real run with failures (MODE 1 does not
    compile, MODE 2 gives wrong answers), from a script as a user runs it. Without racing, so
    that the four passing configurations are all timed whole and confirmed however busy the
    machine is (a raced one is no candidate, and one candidate alone is not confirmed)."""
    tmp = tmp_path_factory.mktemp("tune_kernel")
    (tmp / "scale.c").write_text(SCALE_C)
    (tmp / "tune.py").write_text(TUNE)
    proc = subprocess.run(
        [sys.executable, "tune.py"], cwd=tmp, env=mpi_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    results, env = json.loads(proc.stdout.splitlines()[-1])
    assert {r["time"] for r in results if r["MODE"] != 0} == {"CompilationFailedConfig", "RuntimeFailedConfig"}
    assert env["confirmation"]["winner"]["MODE"] == 0
    return results, env


def test_store_results_takes_tune_kernel_results_with_failures(tune_kernel_results, tmp_path):
    results, env = tune_kernel_results
    path = tmp_path / "results.json"
    params = {"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]}
    api.store_results(str(path), "scale", SCALE_C, params, 4096, results, env)
    (entry,) = json.loads(path.read_text())["data"]  # the confirmed winner alone
    assert entry["tunable_parameters"] == env["confirmation"]["winner"] and entry["mpitune_source"] == "scale.h5"
    assert (
        entry["time"] == env["confirmation"]["winner_ms"]
        and entry.get("mpitune_tied", []) == env["confirmation"]["tied"]
    )
    # Without a confirmation, Kernel Tuner's rule: the passing configurations within 3 % of the best.
    plain_env = {k: v for k, v in env.items() if k != "confirmation"} | {"device_name": "Other CPU"}
    api.store_results(str(path), "scale", SCALE_C, params, (64, 64), results, plain_env, top=50)
    doc = json.loads(path.read_text())
    assert doc["kernel_string"] == SCALE_C and len(doc["data"]) > 1
    others = [e for e in doc["data"] if (e["device_name"], e["problem_size"]) == ("Other_CPU", "64x64")]
    passed = sorted(r["time"] for r in results if r["status"] == "ok")
    assert [e["time"] for e in others] == [t for t in passed if t <= passed[0] * 1.5]
    # Again for the same device and size: its entries replaced, the others kept.
    api.store_results(str(path), "scale", SCALE_C, params, (64, 64), results, plain_env, top=0)
    again = json.loads(path.read_text())["data"]
    assert again[0] == doc["data"][0] and [e["time"] for e in again[1:]] == [passed[0]]
    with pytest.raises(ValueError, match="holds kernel 'scale', not 'other'"):
        api.store_results(str(path), "other", "", params, 4096, results, env)
    with pytest.raises(ValueError, match="no configuration in results has a number"):
        api.store_results(
            str(tmp_path / "none.json"), "scale", "", params, 4096, [r for r in results if r["MODE"]], plain_env
        )


def test_bad_input_is_one_line(tuned, exported, tmp_path):
    damaged = tmp_path / "damaged.json"
    damaged.write_text(exported.read_text()[:-40])
    with pytest.raises(ValueError, match=r"damaged.json: not JSON .*; not a results file"):
        api.TuneResults(str(damaged))
    hostile = json.loads(exported.read_text())
    for entry in hostile["data"]:
        entry["tunable_parameters"]["STEP"] = "1\n#include </etc/passwd>"
    (tmp_path / "hostile.json").write_text(json.dumps(hostile))
    with pytest.raises(ValueError, match="cannot be a #define"):
        api.create_device_targets(str(tmp_path / "h.h"), str(tmp_path / "hostile.json"))
    assert not (tmp_path / "h.h").exists()
    for args, said in (
        ((tuned["confirmed"], tuned["other"], "--format", "header"), "kernel 'k', not 'scale'"),
        ((tuned["confirmed"], tuned["confirmed"], "--format", "kt-results"), "again (also"),
        ((tuned["confirmed"], tuned["small"], "--format", "t4"), "--format t4 writes one file"),
        ((damaged, "--format", "header"), "damaged.json"),
    ):
        proc = offline("export", *args, "--out", tmp_path / "out")
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def kernel_tuner_integration():
    """Kernel Tuner's own module (the test extra's 1.5.0); these tests skip without it."""
    pytest.importorskip("kernel_tuner", reason="needs kernel_tuner (the test extra): pip install -e '.[test]'")
    from kernel_tuner import integration

    return integration


@pytest.mark.filterwarnings("ignore:The metaschema specified by:DeprecationWarning")  # jsonschema, in Kernel Tuner
def test_kernel_tuner_reads_our_results_file_and_names_what_we_name(exported, tmp_path):
    kt = kernel_tuner_integration()
    theirs, ours = kt.TuneResults(str(exported)), api.TuneResults(str(exported))
    assert theirs.data == ours.data and theirs.objective == "time"
    for entry in ours.data:
        device, size = entry["device_name"], entry["problem_size"]
        assert theirs.get_best_config(device) == ours.get_best_config(device)
        # For a device and size it has, Kernel Tuner 1.5.0 returns the entry (less the objective).
        assert theirs.get_best_config(device, size)["tunable_parameters"] == ours.get_best_config(device, size)
    assert theirs.get_best_config() == ours.get_best_config() == ours.get_best_config("No such GPU", 99)
    # Its create_device_targets on our file: the same configuration for every target.
    kt.create_device_targets(str(tmp_path / "kt.h"), str(exported))
    api.create_device_targets(str(tmp_path / "ours.h"), str(exported))
    for device in dict.fromkeys(e["device_name"] for e in ours.data):
        flag = f"-DTARGET_{device}"
        assert compile_and_print(tmp_path / "kt.h", tmp_path, flag) == compile_and_print(
            tmp_path / "ours.h", tmp_path, flag
        )


KT_SOURCE = r"""
#include <time.h>
#if MODE == 1
#error "MODE 1 uses too much shared data"
#endif
float scale(float *x, int n) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i += STEP) x[i] = x[i] * 2.0f + 1.0f;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e3f + (b.tv_nsec - a.tv_nsec) * 1e-6f;
}
"""


@pytest.fixture(scope="module")
def kt_stored(tmp_path_factory) -> Path:
    """A results file Kernel Tuner 1.5.0 wrote itself: its C run of ``scale`` (STEP, and MODE 1
    failing to compile in the words Kernel Tuner skips over), stored by its ``store_results`` for
    two problem sizes."""
    pytest.importorskip("kernel_tuner", reason="needs kernel_tuner (the test extra): pip install -e '.[test]'")
    import kernel_tuner
    import numpy as np
    from kernel_tuner import integration

    tmp = tmp_path_factory.mktemp("kt_stored")
    here = os.getcwd()
    os.chdir(tmp)  # Kernel Tuner writes its sources and objects in the working directory
    try:
        for n in (20000, 40000):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # that no parameter names a thread block dimension
                params = {"STEP": [1, 2, 4, 8], "MODE": [0, 1]}
                args = [np.zeros(n, np.float32), np.int32(n)]
                results, env = kernel_tuner.tune_kernel(
                    "scale", KT_SOURCE, n, args, params, lang="C", iterations=3, quiet=True
                )
            assert sum("__error__" in r for r in results) == 4  # failures among them: Kernel Tuner's way
            env.setdefault("device_name", "Kernel Tuner CPU")  # its C backend's env names no device
            integration.store_results("kt.json", "scale", KT_SOURCE, params, n, results, env, top=30)
    finally:
        os.chdir(here)
    return tmp / "kt.json"


@pytest.mark.filterwarnings("ignore:The metaschema specified by:DeprecationWarning")  # jsonschema, in Kernel Tuner
def test_we_read_the_results_file_kernel_tuner_writes(kt_stored, tune_kernel_results, tmp_path):
    kt = kernel_tuner_integration()
    theirs, ours = kt.TuneResults(str(kt_stored)), api.TuneResults(str(kt_stored))
    assert ours.data == theirs.data and len({e["problem_size"] for e in ours.data}) == 2
    device = ours.data[0]["device_name"]
    for size in ("20000", "40000", None):
        want = theirs.get_best_config(device, size)
        assert ours.get_best_config(device, size) == want.get("tunable_parameters", want)
    api.create_device_targets(str(tmp_path / "ours.h"), str(kt_stored))
    want = ours.get_best_config(device)
    assert compile_and_print(tmp_path / "ours.h", tmp_path, f"-DTARGET_{device}") == (
        f"STEP={want['STEP']} MODE={want['MODE']}"
    )
    # Kernel Tuner's store_results cannot take mpitune's results as they are (a failure's time is
    # its marker, which it compares with the times); ours adds them to its file, which it still reads.
    results, env = tune_kernel_results
    path = tmp_path / "both.json"
    shutil.copy(kt_stored, path)
    params = {"STEP": [1, 2, 4, 8], "MODE": [0, 1]}
    mpitune_env = dict(env, device_name="mpitune CPU")
    with pytest.raises(TypeError):
        kt.store_results(str(path), "scale", KT_SOURCE, params, 4096, results, mpitune_env)
    api.store_results(str(path), "scale", KT_SOURCE, params, 4096, results, mpitune_env)
    both = kt.TuneResults(str(path))
    assert both.get_best_config("mpitune CPU", 4096)["tunable_parameters"] == env["confirmation"]["winner"]
    assert both.data[: len(theirs.data)] == theirs.data
    # And Kernel Tuner adds to ours, keeping mpitune's keys in the entries it does not replace.
    kt.store_results(str(path), "scale", "", params, 1, [{"STEP": 1, "MODE": 0, "time": 1.0}], {"device_name": "GPU 3"})
    kept = api.TuneResults(str(path)).data
    assert next(e for e in kept if e["device_name"] == "mpitune_CPU")["mpitune_confirmed"] is True
    assert {e["device_name"] for e in kept} == {device, "mpitune_CPU", "GPU_3"}
