"""The kernel cache with real gcc compiles and real MPI runs: what hits, what misses, damage,
writers racing, folders that cannot serve, and the setting that turns it off.

gcc is counted by a wrapper given as ``CC`` (it counts the calls that write a library, not
``--version``) and hands every call to the real gcc: a compile the cache saved is one gcc never
ran. The suite turns the cache off (conftest.py); these tests turn it on, each in a folder of its
own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env, mpiexec, recorded_ids, write_scale_spec

from mpitune.backends import c as cbackend
from mpitune.backends import kernel_cache
from mpitune.backends.kernel_cache import CACHE_VARIABLE, CachedCompiler, Image, KernelCache, decode, encode
from mpitune.errors import UserError
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work
from mpitune.spec.load import load_spec

COUNTING_CC = """#!/bin/sh
case " $* " in *" -o "*) echo x >> "{log}";; esac
exec gcc "$@"
"""
OK = {"STEP": 4, "MODE": 0}


def counting_cc(folder: Path) -> tuple[Path, Path]:
    """A gcc that counts its compiles: (its path, its log)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "compiles.log"
    cc = folder / "cc.sh"
    cc.write_text(COUNTING_CC.format(log=log))
    cc.chmod(0o755)
    return cc, log


def gcc_runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def entry_files(folder: Path) -> dict[str, int]:
    """Every entry of the cache with its inode: an entry written again has a new one."""
    return {p.name: p.stat().st_ino for p in folder.rglob("*.kernel")}


@pytest.fixture
def kernels(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "kernels"
    monkeypatch.setenv(CACHE_VARIABLE, str(folder))
    return folder


@pytest.fixture
def gcc_log(tmp_path, monkeypatch) -> Path:
    cc, log = counting_cc(tmp_path / "cc")
    monkeypatch.setenv("CC", str(cc))
    return log


def backend_for(problem, tmp_path: Path, name: str):
    """A fresh C backend, in a working folder of its own, as a new run (or rank) has."""
    work = tmp_path / name
    work.mkdir()
    backend = cbackend.create(problem, str(work), 0)
    backend.prepare()
    return backend


@pytest.fixture
def problem(tmp_path):
    problem, _ = load_spec(str(write_scale_spec(tmp_path)))
    return problem.kernel


def test_a_new_backend_loads_what_an_earlier_one_compiled(problem, tmp_path, kernels, gcc_log):
    first = backend_for(problem, tmp_path, "first")
    assert isinstance(first.compiler(), CachedCompiler)
    assert first.run(Work(0, OK), Timeline()).status == "ok"
    assert gcc_runs(gcc_log) == 1
    stored = entry_files(kernels)
    assert len(stored) == 1

    again = backend_for(problem, tmp_path, "again")  # another run: another working folder
    result = again.run(Work(7, OK), Timeline())  # the same configuration under another id
    assert result.status == "ok", result.error
    assert gcc_runs(gcc_log) == 1  # gcc did not run
    assert entry_files(kernels) == stored  # nor was the entry written again
    assert not list((tmp_path / "again").glob("*.so"))  # the restored library is gone once loaded


def test_every_part_of_the_key_makes_a_new_compile(problem, tmp_path, kernels, gcc_log, monkeypatch):
    """A change of option, define, source or compiler is a miss; each again is a hit."""
    other_cc, other_log = counting_cc(tmp_path / "other-cc")  # another path: a stand-in for another gcc
    source = problem.kernel_source.replace("2.0f", "2.0f + 0.0f")
    cases = {
        "as it was": (problem, OK, os.environ["CC"]),
        "an option": (dataclasses.replace(problem, compiler_options=("-O2",)), OK, os.environ["CC"]),
        "a define": (problem, {"STEP": 8, "MODE": 0}, os.environ["CC"]),
        "the source": (dataclasses.replace(problem, kernel_source=source), OK, os.environ["CC"]),
        "the compiler": (problem, OK, str(other_cc)),
    }
    for round_ in ("miss", "hit"):
        for name, (p, config, cc) in cases.items():
            monkeypatch.setenv("CC", cc)
            backend = backend_for(p, tmp_path, f"{round_}-{name.replace(' ', '-')}")
            runs, entries = gcc_runs(gcc_log) + gcc_runs(other_log), len(entry_files(kernels))
            assert backend.run(Work(0, config), Timeline()).status == "ok", name
            made = 1 if round_ == "miss" else 0
            assert gcc_runs(gcc_log) + gcc_runs(other_log) - runs == made, f"{round_}: {name}"
            assert len(entry_files(kernels)) - entries == made, f"{round_}: {name}"


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


DAMAGE = {
    "truncated": lambda data, other: data[: len(data) // 2],
    "empty": lambda data, other: b"",
    "a byte of the image flipped": lambda data, other: flip(data, len(data) - 100),
    "a byte of the header flipped": lambda data, other: flip(data, len(kernel_cache.MAGIC) + 40),
    "another key's entry": lambda data, other: other,
    "not an entry": lambda data, other: b"\x7fELF" + data[4:],
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_bad_entry_is_compiled_again_and_replaced(problem, tmp_path, kernels, gcc_log, damage):
    backend = backend_for(problem, tmp_path, "run")
    assert backend.run(Work(0, OK), Timeline()).status == "ok"
    assert backend.run(Work(1, {"STEP": 8, "MODE": 0}), Timeline()).status == "ok"
    paths = {p.read_bytes(): p for p in kernels.rglob("*.kernel")}
    assert gcc_runs(gcc_log) == 2 and len(paths) == 2
    compiler = backend.compiler()
    assert isinstance(compiler, CachedCompiler)
    digest = kernel_cache.digest_of([compiler.identity, *compiler.inner.cache_key(Work(0, OK))])
    path = Path(compiler.cache.path(digest))
    good = path.read_bytes()
    other = next(data for data in paths if data != good)
    path.write_bytes(DAMAGE[damage](good, other))

    result = backend.run(Work(0, OK), Timeline())
    assert result.status == "ok", result.error  # never the bad entry loaded
    assert gcc_runs(gcc_log) == 3  # compiled again
    assert path.read_bytes() == good  # and replaced by a whole entry of its own
    assert decode(digest, path.read_bytes()).as_file


def test_entries_say_what_is_wrong_with_them():
    image = Image(b"\x00image\xff" * 100, "kernel", {"coeff": "_Z5coeff"})
    data = encode("ab" * 32, image)
    assert decode("ab" * 32, data) == image
    for bad, why in [
        (data[:-1], "checksum"),
        (flip(data, len(data) - 1), "checksum"),
        (data[:10], "not an entry"),
    ]:
        with pytest.raises(kernel_cache.BadEntry, match=why):
            decode("ab" * 32, bad)
    with pytest.raises(kernel_cache.BadEntry, match="another key"):
        decode("cd" * 32, data)


RACE = """
import hashlib, os, sys, time
from pathlib import Path
from mpitune.backends.kernel_cache import Image, KernelCache

folder, role, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = KernelCache(folder)
digest = "ef" * 32
images = [Image(bytes([i]) * (1 << 20) + hashlib.sha256(bytes([i])).digest(), f"entry{i}") for i in range(3)]
done = [Path(folder).parent / f"reader{i}.done" for i in range(2)]
deadline = time.monotonic() + 90  # whichever process starts first waits for the others
loaded = bad = n = 0
if role == "writer":  # until both readers have read 60 entries, however late they started
    while (n < 60 or not all(d.exists() for d in done)) and time.monotonic() < deadline:
        cache.store(digest, images[(index + n) % 3])
        n += 1
else:
    while loaded < 60 and time.monotonic() < deadline:
        got = cache.load(digest)
        if got is not None:
            loaded += 1
            bad += got not in images
    done[index].touch()
print(loaded, bad)
"""


def test_writers_racing_on_one_key_never_give_a_reader_a_bad_entry(tmp_path):
    """Three processes write the same entry over and over (1 MiB images, each whole one valid)
    while two read it: every read is a whole entry, of one writer or another."""
    script = tmp_path / "race.py"
    script.write_text(RACE)
    folder = tmp_path / "kernels"
    env = mpi_env()
    roles = [("writer", i) for i in range(3)] + [("reader", i) for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(folder), role, str(i)], env=env, stdout=subprocess.PIPE, text=True
        )
        for role, i in roles
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    reads = [(int(loaded), int(bad)) for (role, _), (loaded, bad) in zip(roles, outs) if role == "reader"]
    assert all(bad == 0 for _, bad in reads), reads
    assert all(loaded == 60 for loaded, _ in reads), reads  # each reader saw 60 entries while writers wrote
    assert not list(folder.rglob("*.tmp"))  # no temporary file left behind


COMPILE = """
import sys
from mpitune.backends import c
from mpitune.model.work import Work
from mpitune.spec.load import load_spec

problem, _ = load_spec(sys.argv[1])
backend = c.create(problem.kernel, sys.argv[2], 0)
backend.prepare()
from mpitune.model.timeline import Timeline
print(backend.run(Work(0, {"STEP": 4, "MODE": 0}), Timeline()).status)
"""


def test_processes_compiling_one_configuration_at_once_all_load_a_good_library(tmp_path, kernels):
    """Four processes, an empty cache, the same configuration: each compiles or loads, and each
    library verifies; the entry left is whole."""
    spec = write_scale_spec(tmp_path)
    script = tmp_path / "compile.py"
    script.write_text(COMPILE)
    env = mpi_env()
    procs = []
    for i in range(4):
        work = tmp_path / f"work{i}"
        work.mkdir()
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(spec), str(work)], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["ok"] * 4
    (entry,) = list(kernels.rglob("*.kernel"))
    assert decode(entry.stem, entry.read_bytes()).as_file


def test_off_writes_nothing_and_compiles_every_time(problem, tmp_path, gcc_log, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for value in ("off", "0", "false", "no", "OFF"):
        monkeypatch.setenv(CACHE_VARIABLE, value)
        backend = backend_for(problem, tmp_path, f"run-{value}")
        assert not isinstance(backend.compiler(), CachedCompiler)
        assert backend.run(Work(0, OK), Timeline()).status == "ok"
    assert gcc_runs(gcc_log) == 5
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_the_folder_is_the_settings_or_the_users_cache():
    env = {"HOME": "/home/me"}
    assert kernel_cache.cache_folder(env) == "/home/me/.cache/mpitune/kernels"
    assert kernel_cache.cache_folder({**env, "XDG_CACHE_HOME": "/scratch/c"}) == "/scratch/c/mpitune/kernels"
    assert kernel_cache.cache_folder({**env, "XDG_CACHE_HOME": "relative"}) == "/home/me/.cache/mpitune/kernels"
    assert kernel_cache.cache_folder({**env, CACHE_VARIABLE: "on"}) == "/home/me/.cache/mpitune/kernels"
    assert kernel_cache.cache_folder({**env, CACHE_VARIABLE: "/p/k"}) == "/p/k"
    assert kernel_cache.cache_folder({**env, CACHE_VARIABLE: " Off "}) == ""


def test_the_bound_is_the_settings_in_mib_and_a_bad_one_is_refused_in_one_line():
    """Eviction itself: tests/backends/test_kernel_cache_upkeep.py."""
    variable, default_bytes = kernel_cache.MAX_MB_VARIABLE, 2048 << 20
    assert kernel_cache.max_bytes({}) == default_bytes
    assert kernel_cache.max_bytes({variable: ""}) == default_bytes
    assert kernel_cache.max_bytes({variable: " 64 "}) == 64 << 20
    assert kernel_cache.max_bytes({variable: "0"}) == 0  # no bound
    for bad in ("lots", "-5", "nan", "inf"):
        with pytest.raises(UserError, match=f"environment variable {variable}: .*{bad}"):
            kernel_cache.max_bytes({variable: bad})


def test_a_folder_others_may_write_or_that_is_no_folder_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "others may write" in kernel_cache.unusable(str(shared))
    (tmp_path / "file").write_text("")
    assert "cannot make it" in kernel_cache.unusable(str(tmp_path / "file" / "kernels"))
    assert kernel_cache.unusable(str(tmp_path / "new" / "kernels")) == ""
    assert (tmp_path / "new" / "kernels").stat().st_mode & 0o777 == 0o700  # made private


def test_a_cache_that_fails_to_write_during_a_run_is_said_once_and_compiles_go_on(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    cache = KernelCache(str(tmp_path / "file" / "kernels"))  # a folder that cannot be made
    kernel_cache._warned[0] = False
    for _ in range(3):
        cache.store("ab" * 32, Image(b"image"))
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot write to the kernel cache" in warnings[0].getMessage()
    assert cache.load("ab" * 32) is None


def tune(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Two ranks of mpitune with ``env`` (conftest's ``mpitune`` takes the suite's, cache off)."""
    cmd = [*mpiexec(), "-n", "2", sys.executable, "-m", "mpitune", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


TUNE_PARAMS = '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0]}'


def test_a_second_run_with_another_strategy_compiles_nothing_the_first_compiled(tmp_path):
    """The goal: brute force, then random sampling on the same space into another file; the
    first run's confirmation and calibration load what its search compiled, too."""
    spec = write_scale_spec(tmp_path, TUNE_PARAMS)
    cc, log = counting_cc(tmp_path / "cc")
    env = {**mpi_env(), CACHE_VARIABLE: str(tmp_path / "kernels"), "CC": str(cc)}
    first = tune(tmp_path, [str(spec), "--out", "first.h5"], env)
    assert first.returncode == 0, first.stderr
    assert gcc_runs(log) == 6  # one compile per configuration, none again for the confirmation
    second = tune(tmp_path, [str(spec), "--out", "second.h5", "--strategy", "random_sample", "--confirm", "4"], env)
    assert second.returncode == 0, second.stderr
    assert gcc_runs(log) == 6  # nothing compiled
    assert sorted(recorded_ids(tmp_path / "second.h5")) == list(range(6))
    assert "kernel cache" not in first.stderr + second.stderr


def test_an_unusable_cache_folder_is_one_warning_and_the_run_completes(tmp_path):
    spec = write_scale_spec(tmp_path, TUNE_PARAMS)
    (tmp_path / "file").write_text("")
    env = {**mpi_env(), CACHE_VARIABLE: str(tmp_path / "file" / "kernels")}
    proc = tune(tmp_path, [str(spec), "--out", "run.h5"], env)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "kernel cache" in line]
    assert len(said) == 1 and "not used" in said[0], proc.stderr
    assert sorted(recorded_ids(tmp_path / "run.h5")) == list(range(6))


def test_the_suite_runs_with_the_cache_off():
    """conftest.py turns it off, so that every other test sees real compiles."""
    assert os.environ[CACHE_VARIABLE] == "off"
