"""Issue 41, class 11: messages that name the wrong cause. A run on a read-only file system,
fresh or resumed, ended with exit code 2 and "permission denied" (a check of the permissions
alone); now every place a run creates, opens or locks its file says what the system said, the
file system is read-only, with exit code 74 and what to do, and names the file as the user
knows it, never a temporary beside it. A folder without write permission says "permission
denied", with 74 too.

The read-only file system is a tmpfs mounted read-only by the test, which needs root (CI runs as
root); elsewhere these tests skip with that reason.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import mpi_env, mpitune, write_scale_spec

from mpitune.exits import ExitCode
from mpitune.store.files import claim_temporary, create_hdf5, refuse_unwritable, refused_write
from mpitune.store.lock import hold_writer_lock, lock_file

SPACE = '{"STEP": [1, 2, 4, 8], "MODE": [0]}'


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def read_only_fs(tmp_path) -> Iterator[tuple[Path, Path]]:
    """A folder holding the scale spec and a results file of 2 configurations (in ``tmp_path``),
    then the same, copied onto a tmpfs remounted read-only (the second path)."""
    write_scale_spec(tmp_path, SPACE)
    first = mpitune(1, ["spec.py", "--max-fevals", "2"], tmp_path)
    assert first.returncode == 0, first.stderr
    mount = tmp_path / "ro"
    mount.mkdir()
    done = _mount("-t", "tmpfs", "-o", "size=4M", "tmpfs", str(mount))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        for name in ("spec.py", "scale.c", "spec.h5"):
            shutil.copy(tmp_path / name, mount / name)
        remounted = _mount("-o", "remount,ro", str(mount))
        assert remounted.returncode == 0, remounted.stderr
        yield tmp_path, mount
    finally:
        for _ in range(40):  # an aborted job's workers leave the folder within a second or so
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["umount", "--lazy", str(mount)], check=True)


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("mpitune: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("out", ["new.h5", "spec.h5"], ids=["fresh", "resumed"])
def test_a_run_on_a_read_only_file_system_says_so_with_exit_74(read_only_fs, out):
    _, ro = read_only_fs
    before = (ro / "spec.h5").read_bytes()
    proc = mpitune(2, ["spec.py", "--out", out], ro)
    assert proc.returncode == ExitCode.CANNOT_WRITE, proc.stderr
    line = one_error_line(proc.stderr)
    assert f"{ro / out}: cannot write: the file system is read-only" in line, line
    assert "permission denied" not in line and "make room" not in line and "remount" in line, line
    assert (ro / "spec.h5").read_bytes() == before
    assert sorted(p.name for p in ro.iterdir()) == ["scale.c", "spec.h5", "spec.py"]


def test_every_place_that_opens_the_file_names_the_read_only_file_system(read_only_fs):
    """What the run's start checks, and behind it each open that would meet the same refusal
    should the file system turn read-only in between: each names the file as the user knows it."""
    _, ro = read_only_fs
    cache, new = str(ro / "spec.h5"), str(ro / "new.h5")
    attempts = [
        lambda: refuse_unwritable(cache),
        lambda: refuse_unwritable(new),
        lambda: hold_writer_lock(cache),
        lambda: lock_file(cache, "held", known_as=cache),
        lambda: claim_temporary(new, lambda temporary: create_hdf5(temporary, new)),
    ]
    for attempt, named in zip(attempts, [cache, new, cache, cache, new]):
        with pytest.raises(OSError) as caught:
            attempt()
        refused = refused_write(caught.value)
        assert refused is not None and caught.value.errno == errno.EROFS, caught.value
        assert refused.line == f"{named}: cannot write: the file system is read-only"


def test_a_folder_without_write_permission_is_permission_denied_not_read_only(tmp_path):
    """The check a run makes before it starts, as a user who may read the folder but not write it."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    top = Path(tempfile.mkdtemp(prefix="mpitune-ro-", dir="/tmp"))  # pytest's own folders are private
    folder = top / "ro"
    folder.mkdir()
    os.chmod(top, 0o755)
    os.chmod(folder, 0o555)
    code = (
        "import sys; from mpitune.store.files import refuse_unwritable, refused_write\n"
        "try:\n    refuse_unwritable(sys.argv[1])\nexcept OSError as exc:\n    print(refused_write(exc).line)"
    )
    try:
        proc = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-c", code]
            + [str(folder / "spec.h5")],
            env=mpi_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stdout.strip() == f"{folder / 'spec.h5'}: cannot write: permission denied", proc.stderr
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(top)


REFILLED = "refilled as ranks run short (chunks of up to 32 a rank, dealt once 1 of 2 ranks holds fewer than 2 orders)"
# Ranks without compile workers (one core each, as on a 2-core machine) hold one chunk at a time.
REFILLED_IN_TURN = "refilled as each rank runs out (chunks of up to 32 a rank)"


@pytest.mark.parametrize(
    "ranks, schedule, said",
    [
        (2, "refill", REFILLED),
        (2, "batches", "batches of 64"),
        (1, "refill", "batches of 32"),  # one rank: the two are the same, told as batches
    ],
)
def test_a_run_is_described_by_its_policy_in_its_first_line_and_in_report(tmp_path, ranks, schedule, said):
    write_scale_spec(tmp_path, SPACE)
    proc = mpitune(
        ranks, ["spec.py", "--strategy", "brute_force", "--schedule", schedule, "--max-fevals", "2"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    if said == REFILLED and first.endswith("compiling in turn"):
        said = REFILLED_IN_TURN
    assert f", {said}, " in first, first
    report = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", "spec.h5"],
        cwd=tmp_path,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert f"measured on {ranks} rank(s), {said}, strategy brute_force" in report.stdout, report.stdout
