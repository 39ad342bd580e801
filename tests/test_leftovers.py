"""The session's check for processes the suite leaves running (tests/leftovers.py, conftest's
``pytest_sessionfinish``), shown to catch one: a detached sleeper that carries the session's
id is named and killed, one without it (a site's own daemon) is left alone, and a whole pytest
session whose test leaves a daemon behind fails naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import leftovers
from conftest import REPO, SESSION


def detached_sleeper(env: dict[str, str]) -> int:
    """A sleeper that forks into a session of its own and is reparented away from pytest, as a
    daemon is; its pid. Its command line holds a word of its own, to find it by."""
    word = uuid.uuid4().hex
    code = "import os, time\nif os.fork(): os._exit(0)\nos.setsid()\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, word], env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    pid = int(proc.stdout.readline())
    proc.wait(timeout=30)
    proc.stdout.close()
    assert word in Path(f"/proc/{pid}/cmdline").read_text()
    return pid


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end(pid: int) -> None:
    """Kill a sleeper a test started, whatever became of it."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_a_detached_process_of_the_session_is_named_and_killed():
    pid = detached_sleeper(dict(os.environ))
    try:
        found = [p for p in leftovers.leftovers(SESSION, grace_s=0) if p.pid == pid]
        assert len(found) == 1 and "time.sleep(600)" in found[0].command
        leftovers.kill(found)
        deadline = time.monotonic() + 30
        while alive(pid):
            assert time.monotonic() < deadline, f"process {pid} outlived its SIGKILL by 30 s"
            time.sleep(0.1)
    finally:
        end(pid)


def test_a_process_the_suite_did_not_start_is_left_alone():
    """A daemon without the session's id (as a site's own munged or slurmd) is not named."""
    env = {k: v for k, v in os.environ.items() if k != leftovers.MARKER}
    pid = detached_sleeper(env)
    try:
        assert pid not in {p.pid for p in leftovers.marked(SESSION)}
        assert alive(pid)
    finally:
        end(pid)


def test_this_process_and_its_ancestors_are_not_leftovers():
    """An outer session's pytest, and mpiexec around a --with-mpi one, carry an outer id."""
    assert os.getpid() not in {p.pid for p in leftovers.marked(SESSION)}


LEAKY_TEST = """
import os, subprocess, sys

def test_leaves_a_daemon_behind():
    code = "import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\ntime.sleep(600)\\n"
    subprocess.run([sys.executable, "-c", code, "{word}"], check=True)
"""


def test_a_session_that_leaves_a_daemon_fails_naming_and_killing_it(tmp_path):
    """A whole pytest session with this suite's conftest: its one test passes, but leaves a
    detached sleeper; the session fails, names the sleeper, and the sleeper is gone after."""
    word = uuid.uuid4().hex
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(LEAKY_TEST.format(word=word)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider", "test_leaky.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    named = [line for line in proc.stdout.splitlines() if word in line]
    left = [p for p in leftovers.marked(SESSION) if word in p.command]
    leftovers.kill(left)
    assert proc.returncode == 1 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert len(named) == 1 and "outlived the tests, killed" in named[0], proc.stdout
    assert left == []  # the inner session killed it; this session's check would have seen it too


def test_this_process_own_resource_tracker_is_not_a_leftover():
    """multiprocessing's resource tracker lives until the process that started it ends, after
    the check; it is that process's helper, not something a test left running. It carries the
    session's id, so the helper rule (not a missing mark) is what leaves it out."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    tracker = resource_tracker._resource_tracker._pid
    assert tracker is not None and alive(tracker)
    deadline = time.monotonic() + 30
    while b"resource_tracker" not in Path(f"/proc/{tracker}/cmdline").read_bytes():  # until it has started
        assert time.monotonic() < deadline, "the resource tracker did not start in 30 s"
        time.sleep(0.05)
    assert leftovers._carries(Path(f"/proc/{tracker}/environ").read_bytes(), SESSION)
    assert tracker not in [p.pid for p in leftovers.marked(SESSION)]


def test_an_open_mpi_singleton_orted_of_this_process_is_its_helper_and_no_one_elses():
    """Under Open MPI, importing mpi4py without mpirun starts an orted that lives until this
    process ends; a test's job that left one running from another parent is still named."""
    orted = "orted --hnp --set-sid --report-uri 16 --singleton-died-pipe 17 -mca ess hnp"
    ancestors = leftovers._ancestors()
    assert leftovers._own_helper(os.getpid(), orted, ancestors)
    stranger = max(ancestors) + 1
    while stranger in ancestors:
        stranger += 1
    assert not leftovers._own_helper(stranger, orted, ancestors)
    assert not leftovers._own_helper(os.getpid(), "orted --hnp --set-sid -mca ess hnp", ancestors)
