"""The supervisor with real child processes: replies, hangs, deaths, restarts, orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from conftest import REPO
from supervised_children import alive, obey

from mpitune.process.supervisor import SPAWN, Death, Hang, Lost, Patience, Supervisor


def _start(child: Supervisor) -> Connection:
    """Start the child on a fresh pipe; the rank's end of it."""
    ours, theirs = SPAWN.Pipe()
    child.start(theirs)
    theirs.close()  # only the child holds its end, so that its death closes the pipe
    return ours


def test_a_reply_within_the_deadline_comes_back():
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        patience = Patience(30.0)
        conn.send("config 1")
        assert child.receive(conn, patience) == "config 1"
        assert patience.waited_s < 30.0
    finally:
        child.kill()


def test_the_stop_signals_of_a_job_do_not_end_a_child():
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        conn.send("warm")  # answered: the child is past its start-up, its signal handlers in place
        assert child.receive(conn, Patience(30.0)) == "warm"
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            os.kill(child.pids[0], sig)
        time.sleep(0.5)
        conn.send("still there")
        assert child.receive(conn, Patience(30.0)) == "still there"
    finally:
        child.kill()


def test_a_hang_is_told_at_the_deadline_and_killed():
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        conn.send("hang")
        start = time.monotonic()
        with pytest.raises(Hang) as hang:
            child.receive(conn, Patience(1.2))
        assert 1.1 < time.monotonic() - start < 5
        assert hang.value.deadline_s == 1.2
        assert child.alive()  # a hang is not a death: the child is there until killed
    finally:
        child.kill()
    assert not child.alive() and child.processes[0].exitcode == -signal.SIGKILL


@pytest.mark.parametrize(("order", "description"), [("exit 3", "exit code 3"), ("SIGSEGV", "killed by SIGSEGV")])
def test_a_death_says_how_the_child_ended(order, description):
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        conn.send(order)
        start = time.monotonic()
        with pytest.raises(Death) as death:
            child.receive(conn, Patience(60.0))
        assert str(death.value) == description
        assert time.monotonic() - start < 30  # told when it happened, not at the deadline
    finally:
        child.kill()


def test_a_death_in_a_pool_on_a_queue_is_told_too():
    results = SPAWN.Queue()
    pool = Supervisor(time.sleep, ["a", "b"])
    pool.start(3600)
    try:
        os.kill(pool.pids[1], signal.SIGKILL)
        with pytest.raises(Death) as death:
            pool.receive(results, Patience(60.0))
        assert str(death.value) == "killed by SIGKILL"
    finally:
        pool.kill()
        results.close()
        results.cancel_join_thread()


@pytest.mark.parametrize("order", ["hang", "exit 1", "SIGABRT"])
def test_a_child_started_again_after_a_hang_or_a_death_answers(order):
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        first = child.pids[0]
        conn.send(order)
        with pytest.raises(Lost):
            child.receive(conn, Patience(1.0))
        child.kill()
        conn.close()
        assert not alive(first)
        conn = _start(child)
        assert child.pids[0] != first
        conn.send("again")
        assert child.receive(conn, Patience(30.0)) == "again"
    finally:
        child.kill()


def test_a_stuck_child_ends_by_itself_when_its_parent_is_killed():
    here = Path(__file__).parent
    parent = subprocess.Popen(
        [sys.executable, "-c", "from supervised_children import parent_of_a_stuck_child; parent_of_a_stuck_child()"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=f"{here}{os.pathsep}{REPO}"),
    )
    try:
        stuck = int(parent.stdout.readline())
        time.sleep(1)  # long enough for the child to be stuck in its order, not still starting
        assert alive(stuck)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    while alive(stuck) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(stuck)


def test_a_child_starts_after_the_working_folder_was_deleted(tmp_path, monkeypatch):
    """A scratch folder cleaned up mid-run: the restart of a child must not raise from
    multiprocessing's os.getcwd(); the child starts (in /) and the rank stays where it was."""
    gone = tmp_path / "work"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    child = Supervisor(obey, ["child"])
    conn = _start(child)
    try:
        conn.send("after the folder went")
        assert child.receive(conn, Patience(30.0)) == "after the folder went"
        with pytest.raises(FileNotFoundError):
            os.getcwd()  # the rank's own folder is unchanged: a relative path still fails loudly
    finally:
        child.kill()
