"""Class 5: a full disk and read-only media. A run, or an offline verb, that cannot write says so
in one line and ends with exit code 74 (EX_IOERR); what was recorded before stays intact, and an
older output of the same name is not lost. A read-only cache is still checked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import kt_cache, mpi_env, mpitune, write_scale_spec

from mpitune.exits import ExitCode
from mpitune.store.reader import read

SPACE = '{"STEP": list(range(1, 41)), "MODE": [0]}'


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs: mounting needs root (or CAP_SYS_ADMIN)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        # An aborted job's workers notice within a second or so and leave the folder they ran in.
        for _ in range(40):
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["umount", "--lazy", str(mount)], check=True)
            pytest.fail(f"{mount} was still busy 10 s after the test: a process of the job outlived it")


def fill(directory: Path) -> Path:
    """Write zeros until the file system is full."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def offline(*args: str, cwd: Path, user: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups"] if user else []
    env = mpi_env()
    if user:  # matplotlib's cache: the other user cannot write root's home
        env["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="mpitune-mpl-")
        os.chmod(env["MPLCONFIGDIR"], 0o777)
    try:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "mpitune", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        if user:
            shutil.rmtree(env["MPLCONFIGDIR"], ignore_errors=True)


def one_error_line(proc: subprocess.CompletedProcess, words: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mpitune: error:")]
    assert len(errors) == 1 and words in errors[0], proc.stderr
    # Besides it, at most MPICH's own note that the job was aborted.
    assert all(line in errors or line.startswith("Abort(") for line in proc.stderr.strip().splitlines()), proc.stderr


def test_resume_on_a_full_disk_says_so_and_keeps_every_recorded_row(small_disk):
    spec = write_scale_spec(small_disk, SPACE)
    first = mpitune(2, [str(spec), "--max-fevals", "8", "--batch-size", "2"], small_disk)
    assert first.returncode == 0, first.stderr
    filler = fill(small_disk)
    started = time.monotonic()
    proc = mpitune(2, [str(spec), "--batch-size", "2"], small_disk)
    took = time.monotonic() - started
    assert proc.returncode == ExitCode.CANNOT_WRITE, proc.stderr
    one_error_line(proc, "spec.h5: cannot write: the disk is full")
    assert took < 30, took
    filler.unlink()
    check = offline("check", "spec.h5", cwd=small_disk)
    assert check.returncode == 0 and "8 configurations recorded, sound" in check.stdout, check.stdout
    resumed = mpitune(2, [str(spec), "--batch-size", "8"], small_disk)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(read(str(small_disk / "spec.h5")).results["config_id"]) == list(range(40))


def test_fresh_run_on_a_full_disk_says_so(small_disk):
    spec = write_scale_spec(small_disk, SPACE)
    fill(small_disk)
    started = time.monotonic()
    proc = mpitune(2, [str(spec)], small_disk)
    assert proc.returncode == ExitCode.CANNOT_WRITE, proc.stderr
    one_error_line(proc, "cannot write: the disk is full")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("fmt", ["kt-json", "t4"])
def test_export_to_a_full_disk_keeps_the_older_export(tmp_path, small_disk, fmt):
    kt_cache(tmp_path / "kt.json")
    assert offline("import", "kt.json", "--out", "x.h5", cwd=tmp_path).returncode == 0
    older = small_disk / "out.json"
    older.write_text("an older export\n")
    fill(small_disk)
    proc = offline("export", str(tmp_path / "x.h5"), "--format", fmt, "--out", str(older), cwd=tmp_path)
    assert proc.returncode == ExitCode.CANNOT_WRITE, proc.stderr
    one_error_line(proc, "out.json: cannot write: the disk is full")
    assert older.read_text() == "an older export\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "out.json"]  # no temporary left


@pytest.fixture
def read_only(tmp_path) -> Iterator[Path]:
    """A folder another user (nobody) may read but not write, holding a cache file."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    kt_cache(tmp_path / "kt.json")
    assert offline("import", "kt.json", "--out", "x.h5", cwd=tmp_path).returncode == 0
    top = Path(tempfile.mkdtemp(prefix="mpitune-ro-", dir="/tmp"))  # pytest's own folders are private
    folder = top / "ro"
    folder.mkdir()
    shutil.copy(tmp_path / "x.h5", folder / "x.h5")
    os.chmod(top, 0o755)
    os.chmod(folder, 0o555)
    try:
        yield folder
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(top)


def test_check_of_a_cache_in_a_read_only_folder_checks_without_repairing(read_only):
    proc = offline("check", str(read_only / "x.h5"), cwd=read_only, user="65534")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "read-only here: checking without repairing" in proc.stdout
    assert "6 configurations recorded, sound" in proc.stdout and "Traceback" not in proc.stderr


def test_plot_into_a_read_only_folder_says_so(read_only):
    pytest.importorskip("matplotlib")
    proc = offline("plot", str(read_only / "x.h5"), "--out", str(read_only), cwd=read_only, user="65534")
    assert proc.returncode == ExitCode.CANNOT_WRITE, proc.stderr
    one_error_line(proc, "cannot write: permission denied")
    assert sorted(p.name for p in read_only.iterdir()) == ["x.h5"]
