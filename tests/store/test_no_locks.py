"""File systems without locks (issue 31, class 3): Lustre without ``flock`` and NFS without its
lock daemon answer every lock call with ENOLCK or ENOSYS. Such a file system is made here by an
LD_PRELOAD shim, compiled with gcc, whose ``flock``, ``lockf`` and lock commands of ``fcntl`` fail
as theirs do (both HDF5 in the h5py wheel and Python's fcntl module call them through libc). Without
a setting every command says so in one line and exits 2; under ``HDF5_USE_FILE_LOCKING=FALSE`` or
``MPITUNE_FILE_LOCKING=off`` runs, resumes and the verbs work, with one warning each."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import IDENTITY, PARAMS, mpi_env, mpiexec, write_scale_spec

from mpitune.errors import UserError
from mpitune.store.cache import Cache
from mpitune.store.lock import Locking, locking, writer_alive

SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* What a file system without locks answers: ENOLCK (NFS), or ENOSYS (Lustre) if NOLOCKS_ERRNO says so. */
static int refuse(void)
{
    const char *name = getenv("NOLOCKS_ERRNO");
    errno = name && strcmp(name, "ENOSYS") == 0 ? ENOSYS : ENOLCK;
    return -1;
}

static int locks(int cmd)
{
    return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_GETLK
        || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK;
}

int flock(int fd, int op) { (void)fd; (void)op; return refuse(); }
int lockf(int fd, int cmd, off_t len) { (void)fd; (void)len; return cmd == F_TEST ? 0 : refuse(); }
int lockf64(int fd, int cmd, off_t len) { return lockf(fd, cmd, len); }

/* Every other fcntl command goes to libc's. */
#define PASS_ON(name)                                                               \
    int name(int fd, int cmd, ...)                                                  \
    {                                                                               \
        static int (*next)(int, int, ...);                                          \
        va_list ap;                                                                 \
        va_start(ap, cmd);                                                          \
        void *arg = va_arg(ap, void *);                                             \
        va_end(ap);                                                                 \
        if (locks(cmd))                                                             \
            return refuse();                                                        \
        if (!next)                                                                  \
            next = (int (*)(int, int, ...))dlsym(RTLD_NEXT, #name);                 \
        return next(fd, cmd, arg);                                                  \
    }
PASS_ON(fcntl)
PASS_ON(fcntl64)
"""

# Every lock call fails, and what is not a lock still works, seen from Python as mpitune sees it.
PROBE = textwrap.dedent("""
    import errno, fcntl, os, struct, sys, h5py
    fd = os.open(sys.argv[1] + ".probe", os.O_CREAT | os.O_RDWR)
    assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_RDWR
    calls = {
        "flock": lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
        "lockf": lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
        "F_OFD_SETLK": lambda: fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)),
        "F_OFD_GETLK": lambda: fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)),
        "h5py": lambda: h5py.File(sys.argv[1], "w").close(),
    }
    for name, call in calls.items():
        try:
            call()
            print(name, "ok")
        except OSError as exc:
            print(name, errno.errorcode[exc.errno])
""")

OFF_WARNING = "file locking is off"
UNSUPPORTED = "this file system does not support file locks"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nolocks")
    (folder / "nolocks.c").write_text(SHIM_C)
    library = folder / "nolocks.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(folder / "nolocks.c"), "-ldl"], check=True)
    return library


def without_locks(shim: Path, code: str = "ENOLCK", **settings: str) -> dict[str, str]:
    env = mpi_env()
    env.pop("HDF5_USE_FILE_LOCKING", None)
    env.pop("MPITUNE_FILE_LOCKING", None)
    return {**env, "LD_PRELOAD": str(shim), "NOLOCKS_ERRNO": code, **settings}


def verb(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpitune", *argv], env=env, capture_output=True, text=True, timeout=60)


def tune(env: dict[str, str], spec: Path, cache: Path, *flags: str) -> subprocess.CompletedProcess:
    """One rank, through mpiexec: the ranks get LD_PRELOAD from the environment."""
    argv = [str(spec), "--out", str(cache), "--confirm", "0", "--no-calibrate", "--compile-workers", "0", *flags]
    return subprocess.run(
        [*mpiexec(), "-n", "1", sys.executable, "-m", "mpitune", *argv],
        cwd=spec.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def said_once(proc: subprocess.CompletedProcess, text: str) -> str:
    """The one line of the command's output holding ``text``: there must be one, and no traceback."""
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if text in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return lines[0]


def refused(proc: subprocess.CompletedProcess, path: Path, code: str) -> None:
    """Exit 2 and the error line alone on stderr, naming the file, the errno and what to set."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == said_once(proc, UNSUPPORTED), proc.stderr
    assert str(path.name) in proc.stderr and f"({code}: " in proc.stderr
    assert "HDF5_USE_FILE_LOCKING=FALSE" in proc.stderr and "MPITUNE_FILE_LOCKING=off" in proc.stderr
    assert "another mpitune run" not in proc.stderr


@pytest.mark.parametrize("code", ["ENOLCK", "ENOSYS"])
def test_the_shim_fails_every_lock_call_and_passes_the_rest_on(shim, tmp_path, code):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "probe.h5")],
        env=without_locks(shim, code),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    answers = dict(line.split() for line in proc.stdout.splitlines())
    # HDF5 (built "best effort") shrugs off ENOSYS, not ENOLCK: mpitune's own lock must say it.
    assert answers == {
        "flock": code,
        "lockf": code,
        "F_OFD_SETLK": code,
        "F_OFD_GETLK": code,
        "h5py": "ok" if code == "ENOSYS" else code,
    }


def test_the_setting_mpitunes_first_then_hdf5s():
    assert locking({}) == Locking(True)
    assert locking({"HDF5_USE_FILE_LOCKING": "FALSE"}) == Locking(False, "HDF5_USE_FILE_LOCKING=FALSE")
    assert not locking({"HDF5_USE_FILE_LOCKING": "0"}).on and locking({"HDF5_USE_FILE_LOCKING": "BEST_EFFORT"}).on
    assert locking({"MPITUNE_FILE_LOCKING": "off"}) == Locking(False, "MPITUNE_FILE_LOCKING=off")
    assert locking({"MPITUNE_FILE_LOCKING": "On", "HDF5_USE_FILE_LOCKING": "FALSE"}).on
    assert not locking({"MPITUNE_FILE_LOCKING": "maybe", "HDF5_USE_FILE_LOCKING": "false"}).on


def test_with_locking_off_a_second_writer_goes_unseen(tmp_path, monkeypatch):
    path = str(tmp_path / "c.h5")
    monkeypatch.setenv("MPITUNE_FILE_LOCKING", "off")
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)
    try:
        assert not writer_alive(path)  # what the warning says is given up
    finally:
        cache.close()
    # mpitune's own setting wins: HDF5 unlocked, the writer lock still refuses a second writer.
    monkeypatch.setenv("MPITUNE_FILE_LOCKING", "on")
    monkeypatch.setenv("HDF5_USE_FILE_LOCKING", "FALSE")
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)
    try:
        assert writer_alive(path)
        with pytest.raises(UserError, match="another mpitune run is writing"):
            Cache(path, IDENTITY, PARAMS, iterations=3)
    finally:
        cache.close()


def test_without_locks_a_run_a_resume_and_the_verbs_say_so_and_with_the_setting_work(shim, tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4], "MODE": [0]}')
    cache = tmp_path / "out.h5"
    bare, unlocked = without_locks(shim), without_locks(shim, HDF5_USE_FILE_LOCKING="FALSE")

    refused(tune(bare, spec, cache), cache, "ENOLCK")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale.c", "spec.py"]  # nothing half-made

    fresh = tune(unlocked, spec, cache, "--max-fevals", "1")
    assert fresh.returncode == 0, fresh.stderr
    assert "HDF5_USE_FILE_LOCKING=FALSE" in said_once(fresh, OFF_WARNING)
    made = cache.read_bytes()

    refused(tune(bare, spec, cache), cache, "ENOLCK")  # a resume
    for argv in (["check", str(cache)], ["report", str(cache)]):
        refused(verb(bare, *argv), cache, "ENOLCK")
    assert cache.read_bytes() == made

    resumed = tune(unlocked, spec, cache)
    assert resumed.returncode == 0 and "1 already in" in resumed.stdout, resumed.stderr
    said_once(resumed, OFF_WARNING)
    exported = tmp_path / "out.json"
    for argv in (
        ["check", str(cache)],
        ["report", str(cache), "--json"],
        ["watch", str(cache)],
        ["export", str(cache), "--format", "kt-json", "--out", str(exported)],
        ["import", str(exported), "--out", str(tmp_path / "imported.h5")],
    ):
        done = verb(unlocked, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        said_once(done, OFF_WARNING)
        assert argv[0] != "check" or f"{cache}: 3 configurations recorded, sound" in done.stdout


@pytest.mark.parametrize("code", ["ENOLCK", "ENOSYS"])
def test_a_writer_and_a_reader_without_locks_say_so_under_either_errno(shim, tmp_path, code):
    """ENOSYS is what HDF5 lets pass by default: then mpitune's own lock is the one that says it."""
    cache = tmp_path / "c.h5"
    Cache(str(cache), IDENTITY, PARAMS, iterations=3).close()
    writer = textwrap.dedent(f"""
        import sys; sys.path[:0] = [{str(Path(__file__).parents[2])!r}, {str(Path(__file__).parents[1])!r}]
        from conftest import IDENTITY, PARAMS
        from mpitune.errors import UserError
        from mpitune.store.cache import Cache
        try:
            Cache({str(cache)!r}, IDENTITY, PARAMS, iterations=3).close()
        except UserError as exc:
            print(exc, file=sys.stderr)
            sys.exit(2)
    """)
    env = without_locks(shim, code)
    proc = subprocess.run([sys.executable, "-c", writer], env=env, capture_output=True, text=True, timeout=60)
    refused(proc, cache, code)
    refused(verb(env, "check", str(cache)), cache, code)
    done = verb({**env, "MPITUNE_FILE_LOCKING": "off"}, "report", str(cache))
    assert done.returncode == 0, done.stderr
    assert "MPITUNE_FILE_LOCKING=off" in said_once(done, OFF_WARNING)
