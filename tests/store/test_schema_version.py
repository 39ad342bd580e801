"""A file's ``schema_version``, classified by one rule (store/layout.py) for every verb: a newer
layout is refused by everything that writes and by ``check``, and read by the readers with a
warning; a missing or garbled one is damage; the older versions still read and resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import IDENTITY, PARAMS, info, mpi_env, mpitune, write_scale_spec
from records import append

from mpitune.errors import UserError
from mpitune.model.result import Result
from mpitune.model.schema import SCHEMA_VERSION
from mpitune.store.cache import Cache
from mpitune.store.integrity import DamagedFileError, inspect, refuse_unusable
from mpitune.store.layout import Layout, layout_version
from mpitune.store.reader import read

NEWER = SCHEMA_VERSION + 93  # 99 today
# What a damaged or hand-edited file may hold instead of a version number: None deletes it.
LOST = [None, "abc", b"6", 0, -1, 6.5, True, np.array([6, 6])]


def cache_file(path: Path, version: object = SCHEMA_VERSION) -> Path:
    """A real file of one run with two results, its ``schema_version`` then set to ``version``."""
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h"], ["d"], [1])
    results = [Result(i, "ok", time_ms=1.0 + i, times_ms=[1.0 + i], rank=0) for i in (0, 1)]
    append(cache, results, [{"bs": 32, "kind": "a", "f": 0.5}] * 2, [])
    cache.close()
    with h5py.File(path, "a") as f:
        if version is None:
            del f.attrs["schema_version"]
        else:
            f.attrs["schema_version"] = version
    return path


def verb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpitune", *args], capture_output=True, text=True, env=mpi_env(), timeout=60
    )


@pytest.mark.parametrize(
    "version, layout",
    [(1, Layout.OLDER), (SCHEMA_VERSION - 1, Layout.OLDER), (SCHEMA_VERSION, Layout.CURRENT), (NEWER, Layout.NEWER)]
    + [(v, Layout.LOST) for v in LOST],
)
def test_every_value_a_file_may_hold_is_classified(tmp_path, version, layout):
    with h5py.File(cache_file(tmp_path / "c.h5", version), "r") as f:
        found = layout_version(f)
    assert found.layout is layout
    assert bool(found.damage) == (layout is Layout.LOST)
    if layout is Layout.LOST:
        assert "schema_version" in found.damage and found.number == 0
    else:
        assert found.number == version


def test_a_newer_file_is_not_resumed_and_not_changed(tmp_path):
    path = cache_file(tmp_path / "c.h5", NEWER)
    before = path.read_bytes()
    for attempt in (lambda: refuse_unusable(str(path)), lambda: Cache(str(path), IDENTITY, PARAMS, iterations=3)):
        with pytest.raises(UserError, match=f"layout version {NEWER}, newer than this mpitune's {SCHEMA_VERSION}"):
            attempt()
    assert path.read_bytes() == before


@pytest.mark.parametrize("version", LOST[:3])
def test_a_lost_version_is_damage_a_resume_refuses(tmp_path, version):
    path = cache_file(tmp_path / "c.h5", version)
    before = path.read_bytes()
    with pytest.raises(DamagedFileError, match="is damaged: attribute schema_version is"):
        Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert path.read_bytes() == before
    found = inspect(str(path))
    assert found.problems[0].startswith("attribute schema_version is") and not found.fixed


@pytest.mark.parametrize("version", range(2, SCHEMA_VERSION))
def test_an_older_version_reads_checks_and_resumes_as_before(tmp_path, version):
    path = cache_file(tmp_path / "c.h5", version)
    assert read(str(path)).schema_version == version
    assert not inspect(str(path)).problems
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    assert cache.start_run(info(), ["h"], ["d"], [1]) == 1
    cache.close()
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == version and len(f["runs"]) == 2  # resumed; its version kept


def test_check_never_calls_a_newer_file_sound(tmp_path):
    path = cache_file(tmp_path / "c.h5", NEWER)
    before = path.read_bytes()
    for flags in ([], ["--no-repair"], ["--salvage"]):
        proc = verb("check", str(path), *flags)
        assert proc.returncode == 2, flags
        assert "sound" not in proc.stdout and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and f"layout version {NEWER}, newer" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize("version", [None, "abc"])
def test_check_calls_a_lost_version_damage_and_salvage_restores_one(tmp_path, version):
    path = cache_file(tmp_path / "c.h5", version)
    proc = verb("check", str(path))
    assert proc.returncode == 2 and "sound" not in proc.stdout
    assert "problem: attribute schema_version is" in proc.stdout
    proc = verb("check", str(path), "--salvage")
    assert proc.returncode == 0, proc.stderr
    with h5py.File(path, "r") as f:
        assert layout_version(f).layout is Layout.CURRENT  # it holds every table of this version
    assert "2 configurations recorded, sound" in verb("check", str(path)).stdout


@pytest.mark.parametrize("version", [None, "abc"])
def test_the_readers_refuse_a_lost_version_in_one_line(tmp_path, version):
    path = cache_file(tmp_path / "c.h5", version)
    for args in (["report", str(path)], ["export", str(path), "--format", "kt-json", "--out", str(tmp_path / "x")]):
        proc = verb(*args)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith(f"mpitune: error: {path} is damaged: attribute schema_version is")
        assert proc.stderr.count("\n") == 1


def test_the_readers_read_a_newer_file_with_a_warning(tmp_path):
    path = cache_file(tmp_path / "c.h5", NEWER)
    proc = verb("report", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" in proc.stderr and f"layout version {NEWER}, newer than this mpitune's" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["configs"] == 2 and report["best"]["time_ms"] == 1.0
    assert read(str(path)).schema_version == NEWER


def test_a_run_into_a_newer_file_is_refused_before_any_rank_works(tmp_path):
    spec = write_scale_spec(tmp_path)
    out = tmp_path / "spec.h5"
    assert mpitune(1, [str(spec), "--out", str(out), "--max-fevals", "1"], tmp_path).returncode == 0
    with h5py.File(out, "a") as f:
        f.attrs["schema_version"] = NEWER
    before = out.read_bytes()
    proc = mpitune(2, [str(spec), "--out", str(out)], tmp_path)
    assert proc.returncode == 2
    assert f"layout version {NEWER}, newer than this mpitune's {SCHEMA_VERSION}: it was not changed" in proc.stderr
    assert "Traceback" not in proc.stderr and "batch" not in proc.stdout
    assert out.read_bytes() == before
