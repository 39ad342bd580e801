"""check on files that crashes leave behind, made for real (a writer killed mid-batch)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
from conftest import IDENTITY, PARAMS, info, mpi_env, mpitune, write_scale_spec
from records import append

from mpitune.cli import main
from mpitune.model.judging.confirmation import DeviceFactor
from mpitune.model.prior import PriorSource
from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.model.work import Launch
from mpitune.store.cache import Cache
from mpitune.store.reader import read

HALF_WRITTEN = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    import numpy as np
    from mpitune.store.cache import Cache, RunInfo
    from mpitune.model.result import Result
    from conftest import IDENTITY, PARAMS, info
    from records import append
    cache = Cache({path!r}, IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d", "d"], [1, 2])
    cache.hand_out(0, [[0, 2], [1]], 3, [0, 2, 1])
    append(cache, [Result(0, "ok", time_ms=1.0, rank=0)], [{{"bs": 32, "kind": "a", "f": 0.5}}])
    cache.hand_out(1, [[2, 3], [4]], 3, [2, 3, 4])
    # The writer dies between resizing for the next rows and filling them.
    cache.results.resize((len(cache.results) + 2,))
    cache.file.flush()
    os.kill(os.getpid(), signal.SIGKILL)
""")


def run_check(path, *flags):
    return subprocess.run(
        [sys.executable, "-m", "mpitune", "check", str(path), *flags],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_repairs_a_half_written_batch_and_names_what_was_in_flight(tmp_path):
    tests = Path(__file__).resolve().parent.parent
    path = tmp_path / "c.h5"
    code = HALF_WRITTEN.format(repo=str(tests.parent), tests=str(tests), path=str(path))
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    looked = run_check(path, "--no-repair")
    assert looked.returncode == 1 and "needs repair: dropped 2 half-written row(s)" in looked.stdout
    assert "sound once repaired" in looked.stdout
    fixed = run_check(path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "dropped 2 half-written row(s) at the end of results" in fixed.stdout
    assert "run 0 was killed" in fixed.stdout
    assert "batch 1 of run 0 was in flight: rank 0 held 2, 3; rank 1 held 4" in fixed.stdout
    with h5py.File(path, "r") as f:
        assert list(f["results"]["config_id"]) == [0]
        assert f["runs"][0]["status"] == b"killed"
    assert run_check(path).returncode == 0  # and it stays sound


def test_check_refuses_garbage_with_one_line(tmp_path):
    path = tmp_path / "c.h5"
    path.write_bytes(np.arange(100, dtype=np.int64).tobytes())
    proc = run_check(path)
    assert proc.returncode == 2 and proc.stderr.startswith("mpitune: error:") and "Traceback" not in proc.stderr


def test_a_run_with_compile_workers_is_sound_and_resumes(tmp_path):
    """Compile workers record their own background phase (compile_ahead) in the timeline: a
    phase the file may hold, not damage."""
    spec = write_scale_spec(tmp_path)
    out = tmp_path / "out.h5"
    first = mpitune(2, [str(spec), "--out", str(out), "--compile-workers", "1"], tmp_path)
    assert first.returncode == 0, first.stderr
    with h5py.File(out, "r") as f:
        assert b"compile_ahead" in set(f["timeline"]["phase"])
    checked = run_check(out)
    assert checked.returncode == 0 and checked.stdout.strip().endswith("sound"), checked.stdout + checked.stderr
    again = mpitune(2, [str(spec), "--out", str(out), "--compile-workers", "1"], tmp_path)
    assert again.returncode == 0, again.stderr


def test_a_missing_file_is_no_such_file_not_damaged(tmp_path, monkeypatch, capsys):
    proc = subprocess.run(  # --salvage gave a traceback
        [sys.executable, "-m", "mpitune", "check", "--salvage", "missing.h5"],
        cwd=tmp_path,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == "mpitune: error: missing.h5: no such file\n"
    assert list(tmp_path.iterdir()) == []  # no backup of nothing
    monkeypatch.chdir(tmp_path)
    for flags in ([], ["--no-repair"]):  # the same command line, in process
        assert main(["check", *flags, "missing.h5"]) == 2
        assert capsys.readouterr() == ("", "mpitune: error: missing.h5: no such file\n")
    assert main(["check", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"mpitune: error: {tmp_path}: is a directory, not a results file\n"


def test_salvage_keeps_the_priors_the_history_and_the_devices_compared(tmp_path, capsys):
    """A flipped byte in the timeline's chunk costs its rows; every other table is copied whole
    into the salvaged file: the priors, so that a resume still knows what its search started from,
    the search's history (the asks and what was told before each), and the devices compared (the
    calibration's launches and factors)."""
    path = tmp_path / "c.h5"
    first = PriorSource("/a/kt.json", "k", "Other GPU", "[4096]", ("bs", "kind"), 6, "a" * 64)
    second = PriorSource("/b/more.h5", "k_v1", "Third GPU", '["n", 2]', ("f",), 4, "b" * 64)
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    for run, priors in enumerate(((first, second), (second,))):
        cache.start_run(info(priors=priors), ["h"], ["d"], [1])
        cache.hand_out(0, [[run]], requested=1, asked=[run], told=0)
        phases = [(0, PhaseRow(0, run, "benchmark", 0.0, 1.0))]
        append(
            cache,
            [Result(run, "ok", time_ms=1.0, times_ms=[1.0] * 3, rank=0)],
            [{"bs": 32, "kind": "a", "f": 0.5}],
            phases,
        )
        cache.append_calibration(run, [(0, Launch(0, 0, 1.0 + run))], [DeviceFactor(0, 1.0, 0.01, False)])
        cache.finish_run(1.0, "finished", 1)
    cache.close()
    with h5py.File(path, "r") as f:
        tables = {name: f[name][...] for name in ("retimed", "device_factors", "asked", "told")}
        assert [len(t) for t in tables.values()] == [2, 2, 2, 2]
        chunk = f["timeline"].id.get_chunk_info(0)
    before = read(str(path)).priors
    assert [(int(r["run"]), str(r["path"])) for r in before] == [
        (0, "/a/kt.json"),
        (0, "/b/more.h5"),
        (1, "/b/more.h5"),
    ]
    data = bytearray(path.read_bytes())
    for at in range(chunk.byte_offset, chunk.byte_offset + chunk.size, max(1, chunk.size // 8)):
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))

    assert main(["check", str(path), "--salvage"]) == 0
    assert "salvaged: 2 configuration(s) kept" in capsys.readouterr().out
    after = read(str(path))
    assert len(after.timeline) == 0 and len(after.results) == 2  # the damage was real, and only there
    assert after.priors.tolist() == before.tolist()
    with h5py.File(path, "r") as f:
        assert {name: f[name][...].tolist() for name in tables if name in f} == {
            name: rows.tolist() for name, rows in tables.items()
        }
    assert main(["check", str(path)]) == 0  # sound
