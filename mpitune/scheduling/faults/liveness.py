"""Whether the other ranks are alive, from the heartbeats they send: pure bookkeeping.

A rank can stop answering without dying (SIGSTOP, a lost link). Slurm notices a lost node only after
``SlurmdTimeout`` (300 s by default), and the per-batch deadline only once the batch is overdue. So
every rank beats to rank 0, and rank 0 to every worker (heartbeat.py). A peer that sent nothing for
the liveness timeout is silent, however long its batch. The timeout must exceed what holds back a
healthy thread: a long HDF5 write or a strategy's ask may hold the GIL for seconds. It must also
leave room to close the file and end the job within 60 s. Hence ``DEFAULT_TIMEOUT_S`` = 20 s
(docs/reliability.md). No MPI and no clock of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mpitune.errors import environment_number

DEFAULT_TIMEOUT_S = 20.0  # see the module's docstring and docs/reliability.md
# A heartbeat every 2 s at most, and at least 5 per timeout, so that one late beat (a GIL held
# for a second) is not taken for silence.
MAX_INTERVAL_S = 2.0
BEATS_PER_TIMEOUT = 5
UNKNOWN_HOST = "an unknown host"


def seconds_setting(
    setting: float | None, variable: str, default_s: float, environ: dict[str, str] | None, zero_ok: bool = True
) -> float:
    """Seconds the command line gives, else the environment variable's, else the default. A variable
    set to no such number (``nan``, ``-1``, ``soon``) is refused in one line (``UserError``). A
    fallback to the default would hide it, and ``nan`` would turn its watch off. The command line
    checks the variables before MPI starts (cli/)."""
    if setting is not None:
        return setting
    return environment_number(variable, default_s, zero_ok, environ)


def timeout_s(setting: float | None) -> float:
    """The liveness timeout the run gives (its flag's, else its variable's: spec/settings_table.py),
    else the default. 0 turns the heartbeats off, leaving the per-batch deadline alone."""
    return DEFAULT_TIMEOUT_S if setting is None else setting


def interval_s(timeout_s: float) -> float:
    """How often a rank sends its heartbeat and looks for its peers'."""
    return min(MAX_INTERVAL_S, timeout_s / BEATS_PER_TIMEOUT)


@dataclass(frozen=True)
class Silence:
    """Peers that sent no heartbeat for longer than ``timeout_s``: their ranks, hosts and how long
    each has been silent."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    silent_s: tuple[float, ...]
    timeout_s: float

    @property
    def longest_s(self) -> float:
        return max(self.silent_s)


class Liveness:
    """When each peer was last heard from, on the caller's monotonic clock. A peer never heard from
    counts from ``now_s`` at construction. The ranks start beating moments after MPI is up, so a
    rank that stopped during start-up is silent too."""

    def __init__(self, peers: Sequence[int], timeout_s: float, now_s: float):
        self.timeout_s = timeout_s
        self.heard_s = {peer: now_s for peer in peers}
        self.hosts: dict[int, str] = {}
        # The longest each peer went unheard when the silence was judged: the margin a run had.
        self.longest_s = {peer: 0.0 for peer in peers}

    def heard(self, peer: int, now_s: float, host: str = "") -> None:
        """A heartbeat (or any sign of life) from ``peer`` arrived at ``now_s``."""
        if peer in self.heard_s:
            self.heard_s[peer] = max(self.heard_s[peer], now_s)
            if host:
                self.hosts[peer] = host

    def know_hosts(self, hosts: Sequence[str]) -> None:
        """Every rank's host, from the start-up exchange: a peer that stops before its first beat is
        named by host too."""
        for peer in self.heard_s:
            self.hosts.setdefault(peer, hosts[peer])

    def silence(self, now_s: float) -> Silence | None:
        """The peers silent for longer than the timeout at ``now_s``; None while all are heard. The
        caller first takes in every beat that arrived, so that its own late turn is not taken for
        its peers' silence."""
        for peer, heard in self.heard_s.items():
            self.longest_s[peer] = max(self.longest_s[peer], now_s - heard)
        silent = sorted((peer, now_s - heard) for peer, heard in self.heard_s.items() if now_s - heard > self.timeout_s)
        if not silent:
            return None
        return Silence(
            tuple(peer for peer, _ in silent),
            tuple(self.hosts.get(peer, UNKNOWN_HOST) for peer, _ in silent),
            tuple(seconds for _, seconds in silent),
            self.timeout_s,
        )


class Watch:
    """What rank 0's main thread and its heartbeat thread share, so that whichever notices a silent
    rank first ends the run, and one of them closes the file. The main thread holds ``writing``
    while it writes, sets ``polling`` while it waits in a gather, and ``ending`` once it ends the
    run. ``close``, set once the file is open, closes it (``writing`` held); ``closed`` says so."""

    def __init__(self) -> None:
        self.writing = threading.Lock()
        self.silence: Silence | None = None
        self.polling = False
        self.ending = False
        self.closed = False
        self.path = ""
        self.close: Callable[[], None] | None = None
