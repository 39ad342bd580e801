"""Broken input, run for real: every rank of ``mpiexec -n 4`` ends with exit code 2 within
10 s, one line on stderr names the file and the field, no traceback, no process left behind.

The broken specs are tests/data/bad_specs/*.py. Each starts with comments: ``# Broken:`` what
is wrong, ``# expect:`` the field the error line must name after the spec's path (or
``# names:`` a file it must name instead), and optionally ``# args:`` command-line flags.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import IDENTITY, REPO, mpi_env, mpiexec, mpitune, write_scale_spec

CORPUS = REPO / "tests" / "data" / "bad_specs"
SPECS = sorted(p.name for p in CORPUS.glob("*.py"))
# Rank 0 and a worker: the two roles a refusal must end (every worker loads the spec as the first
# does); four ranks on the suite's two cores took twice as long per spec, 122 specs.
RANKS = 2
LIMIT_S = 10.0
# Every rank prints the exit code mpitune's main gives it (argparse's included) and exits with it.
MAIN = (
    "import sys, mpitune.cli as c\n"
    "try:\n    code = c.main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
    "sys.stdout.write(f'exit {code}\\n')\nsys.stdout.flush()\nsys.exit(code)\n"
)  # one write: no interleaving


def directives(spec: Path) -> dict[str, str]:
    """The ``# key: value`` comments at the top of a corpus file."""
    found = {}
    for line in spec.read_text().splitlines():
        match = re.match(r"#\s*(\w+):\s*(.*)", line)
        if not match:
            break
        found[match[1]] = match[2].strip()
    return found


def session_processes(sid: int) -> list[str]:
    """Live processes of session ``sid`` (mpiexec's, started with start_new_session)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return found


def run_job(args: list[str], cwd: Path, ranks: int = RANKS, timeout: float = 3 * LIMIT_S):
    """``mpiexec -n ranks python -c MAIN args`` in a session of its own, so that whatever
    outlives it can be found (and is killed after the check)."""
    cmd = [*mpiexec(), "-n", str(ranks), sys.executable, "-c", MAIN, *args]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"still running after {timeout:.0f} s: {shlex.join(args)}\n{stderr[-3000:]}")
    elapsed = time.monotonic() - start
    left = session_processes(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout, stderr, elapsed, left


def assert_refused(returncode: int, stdout: str, stderr: str, elapsed: float, left: list[str]) -> str:
    """Exit code 2 from mpiexec and from main on every rank, in time, one line, nothing left."""
    assert not left, f"processes left behind: {left}"
    assert elapsed < LIMIT_S, f"took {elapsed:.1f} s"
    assert "Traceback" not in stderr + stdout, stderr
    codes = [line for line in stdout.splitlines() if line.strip()]
    assert codes == ["exit 2"] * RANKS, stdout + stderr
    assert returncode == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mpitune: error: "), stderr
    return lines[0]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A copy of the corpus to run in (caches land here), with a cache of another problem."""
    from mpitune.store.cache import Cache

    here = tmp_path / "bad_specs"
    shutil.copytree(CORPUS, here)
    Cache(
        str(here / "other_problem.h5"),
        replace(IDENTITY, kernel_name="other", tune_params={"X": (1, 2)}),
        {"X": [1, 2]},
        3,
    ).close()
    return here


def test_the_corpus_is_large_enough():
    assert len(SPECS) >= 25
    for name in SPECS:
        found = directives(CORPUS / name)
        assert found.get("Broken") and (found.get("expect") or found.get("names")), name


@pytest.mark.parametrize("name", SPECS, ids=[s.removesuffix(".py") for s in SPECS])
def test_broken_spec_ends_every_rank_with_one_line(corpus: Path, name: str):
    spec = corpus / name
    found = directives(spec)
    line = assert_refused(*run_job([str(spec), *shlex.split(found.get("args", ""))], corpus))
    if "expect" in found:
        assert f"mpitune: error: {spec}: {found['expect']}" in line, line
    if "names" in found:
        assert found["names"] in line, line
    # Refused before anything is written: no directory made for a cache, no lock beside one.
    assert not {"no", "missing_dir"} & {p.name for p in corpus.iterdir()}
    assert not list(corpus.parent.glob("*.lock"))


def test_missing_spec_file(tmp_path: Path):
    line = assert_refused(*run_job([str(tmp_path / "nothing.py")], tmp_path))
    assert f"{tmp_path / 'nothing.py'}: spec: no such file" in line


@pytest.mark.parametrize(
    "flags,phrase",
    [
        (["--max-fevals", "abc"], "--max-fevals: invalid int value: 'abc'"),
        (["--time-limit", "soon"], "--time-limit: not a number: 'soon'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ([], "required: spec"),
    ],
    ids=["max-fevals-not-a-number", "time-limit-not-a-number", "unknown-flag", "no-spec"],
)
def test_bad_flags_are_one_usage_error_from_one_rank(tmp_path: Path, flags, phrase):
    spec = [str(write_scale_spec(tmp_path))] if flags else []
    line = assert_refused(*run_job([*spec, *flags], tmp_path))
    assert phrase in line and "--help" in line, line


@pytest.fixture(scope="module")
def good_cache(tmp_path_factory) -> Path:
    """A real cache file, from a one-rank run of a small problem."""
    directory = tmp_path_factory.mktemp("good")
    spec = write_scale_spec(directory)
    proc = mpitune(1, [str(spec)], directory, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return directory / "spec.h5"


def _truncated(good: Path, bad: Path) -> None:
    bad.write_bytes(good.read_bytes()[:3000])


def _overwritten(good: Path, bad: Path) -> None:
    data = bytearray(good.read_bytes())
    data[2000:4000] = b"garbage!" * 250
    bad.write_bytes(bytes(data))


def _text(good: Path, bad: Path) -> None:
    bad.write_text("not an HDF5 file\n")


def _empty(good: Path, bad: Path) -> None:
    bad.write_bytes(b"")


def _foreign_hdf5(good: Path, bad: Path) -> None:
    import h5py

    with h5py.File(bad, "w") as f:
        f["x"] = [1, 2, 3]


# cache.read opens with swmr=True, and HDF5's SWMR reader retries a file whose metadata does
# not check out (truncated, or a bad checksum) for minutes before it gives up.


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_truncated, id="truncated"),
        pytest.param(_overwritten, id="corrupt"),
        _text,
        _empty,
        _foreign_hdf5,
    ],
)
def test_report_of_a_broken_cache_is_one_line(good_cache: Path, tmp_path: Path, make):
    bad = tmp_path / "bad.h5"
    make(good_cache, bad)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpitune", "report", str(bad)],
        cwd=tmp_path,
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _stdout, stderr = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"report of a {make.__name__.strip('_')} cache still running after {LIMIT_S:.0f} s")
    assert time.monotonic() - start < LIMIT_S
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mpitune: error: ") and str(bad) in lines[0], stderr


def test_report_of_a_missing_file(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(tmp_path / "none.h5")],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mpitune: error: "), proc.stderr
