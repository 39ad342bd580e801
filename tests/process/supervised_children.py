"""What the supervisor's tests run in child processes (importable by a spawned child), and
how they look at processes from outside, through /proc."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection

from mpitune.process.supervisor import SPAWN, Supervisor


def obey(conn: Connection) -> None:
    """Do what each message says: "hang" (a kernel that never returns), "exit N", "SIGSEGV"
    (or another signal's name) to die of it; answer anything else with itself."""
    while True:
        try:
            order = conn.recv()
        except EOFError:  # the rank closed its end
            return
        if order == "hang":
            time.sleep(3600)
        elif order.startswith("exit "):
            os._exit(int(order.split()[1]))
        elif order.startswith("SIG"):
            os.kill(os.getpid(), signal.Signals[order])
            time.sleep(3600)
        else:
            conn.send(order)


def parent_of_a_stuck_child() -> None:
    """A stand-in for a rank: start a child stuck for good, say its pid, wait to be killed."""
    ours, theirs = SPAWN.Pipe()
    child = Supervisor(obey, ["stuck"])
    child.start(theirs)
    ours.send("hang")
    print(child.pids[0], flush=True)
    time.sleep(3600)


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie that nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
