"""A job of several device models (``devices = "each"``): the ranks grouped by model, each group a
run of its own, and the groups' leaders telling each other what they measured.

A group is today's run on a communicator of its ranks: its own file, search, calibration and
confirmation. Its leader (the group's rank 0) shares its results with the other leaders between
asks (``Peers``), and its strategy learns them as a prior (``Strategy.learn_prior``). The leaders'
messages go through a ``Link``; ``MpiLink`` is MPI's, so ``Peers`` runs without MPI in tests.
docs/running.md, "Several device models in one job", says what a user sees.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from mpitune.model.portable import ranked_candidates
from mpitune.model.prior import Prior, PriorSource, usable
from mpitune.model.problem import Devices, Problem, RunSettings, for_replay_source
from mpitune.model.result import Scored, Status
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.comm import MPI, MpiTransport
from mpitune.scheduling.messages import Placement
from mpitune.scheduling.prepare import Deadline
from mpitune.scheduling.transport import pauses

# Own results a group's search has been told before it is given the others': its first model
# round (benchmarks/device_models.py measured 0, 16 and 32; 16 lost least and gained most).
OWN_RESULTS_FIRST = 16
_SHARE_TAG = 21  # leader -> leader: results, or that it is done
SETTLE_S = 5.0  # the most a group's rank 0 waits for its last orders to be taken before freeing


@dataclass(frozen=True)
class Groups:
    """The ranks of a job grouped by device model, in the order each model's first rank comes."""

    models: tuple[str, ...]
    of_rank: tuple[int, ...]  # each world rank's group
    placements: tuple[Placement, ...]  # each world rank's, as rank 0 gathered them

    @classmethod
    def of(cls, settings: RunSettings, placements: Sequence[Placement]) -> Groups | None:
        """The groups for ``devices = "each"`` over several models; None otherwise (one run)."""
        if settings.devices is not Devices.EACH:
            return None
        models = tuple(dict.fromkeys(p.device for p in placements))
        if len(models) < 2:
            return None
        return cls(models, tuple(models.index(p.device) for p in placements), tuple(placements))

    def placements_of(self, group: int) -> list[Placement]:
        """``group``'s ranks' placements, in the group's rank order."""
        return [p for p, g in zip(self.placements, self.of_rank) if g == group]

    def paths(self, cache_path: str) -> list[str]:
        """Each group's results file: the run's, with the model's name before the suffix."""
        return [model_path(cache_path, model) for model in self.models]

    def describe(self) -> str:
        """The groups as the run's first line says them."""
        return "; ".join(
            f"{model}: rank(s) {', '.join(str(r) for r, g in enumerate(self.of_rank) if g == group)}"
            for group, model in enumerate(self.models)
        )


@dataclass(frozen=True)
class Asked:
    """What the job was asked to do, for a group's leader, which opens its own model's run: how
    rank 0 loaded the problem, and when and how the job began."""

    load: Callable[[], tuple[Problem, RunSettings]]
    debug: bool
    deadline: Deadline | None
    started_unix: float
    command: str


def own_problem(problem: Problem, world_rank: int) -> Problem:
    """The problem a group's leader searches: in a replay of several files, the file its ranks
    replay (``ReplaySource.file_of``); else the problem itself."""
    replay = problem.kernel.replay
    return problem if replay is None else for_replay_source(problem, replay.file_of(world_rank))


def model_path(cache_path: str, model: str) -> str:
    """``STEM.<model>.h5`` for ``STEM.h5``: the model's name with every run of characters a file
    name should not hold made one ``_``."""
    stem, suffix = os.path.splitext(cache_path)
    safe = re.sub(r"[^A-Za-z0-9.+-]+", "_", model.replace(" (replayed)", "")).strip("_.") or "device"
    return f"{stem}.{safe}{suffix or '.h5'}"


class Link(Protocol):
    """The leaders' messages: results to each other leader, and those that arrived since the last
    look; ``leave`` ends them."""

    def send(self, peer: int, message: Any) -> None: ...
    def arrived(self) -> list[tuple[int, Any]]: ...
    def leave(self) -> None: ...


@dataclass(frozen=True)
class _Measured:
    """Results a leader shares: configurations (value tuples in the space's parameter order) and
    their times (ms; NaN where one failed)."""

    configs: tuple[tuple[Any, ...], ...]
    time_ms: tuple[float, ...]


@dataclass
class _Peer:
    """What one other group has shared so far: its best time (ms) for each id of this space, NaN
    where it has none."""

    source: PriorSource
    time_ms: np.ndarray


class Peers:
    """A leader's side of the sharing: its results out, the others' in, as one prior.

    Main thread of the group's rank 0. ``share`` takes what the search is told; ``trade`` sends it
    and returns the others' results as a prior on this space's ids, once there is something new
    and the search has had ``OWN_RESULTS_FIRST`` results of its own. Once its search has ended,
    ``searched`` says so to the others, and ``portable`` ranks the candidates every model times at
    the end (``--portable N``), once every other model's search has ended too."""

    def __init__(self, link: Link, me: int, groups: Groups, paths: Sequence[str], space: SearchSpace, kernel: str):
        self.link, self.me, self.space = link, me, space
        self.peers = {
            g: _Peer(PriorSource(paths[g], kernel, model, "", tuple(space.names), 0), np.full(len(space), math.nan))
            for g, model in enumerate(groups.models)
            if g != me
        }
        # Each parameter's value -> its index: every model tunes the same parameters and values.
        self._index = [{v: i for i, v in enumerate(space.tune_params[name])} for name in space.names]
        self._outgoing: list[tuple[tuple[Any, ...], float]] = []
        self._own = 0
        self._new = False
        # This model's own best time of each id (NaN: none yet), and the ids it measured at all.
        self.own_ms = np.full(len(space), math.nan)
        self.own_seen = np.zeros(len(space), dtype=bool)
        self._searched: set[int] = set()  # the groups whose search has ended: no more results come
        self.ended = False  # this group's search has ended, and the others were told
        self._ranked: list[int] | None = None

    def share(self, results: Iterable[Scored]) -> None:
        """Results this group's search was told, for the others."""
        for r in results:
            self._own += 1
            self._outgoing.append((tuple(r.config[name] for name in self.space.names), self.keep(r)))

    def keep(self, result: Scored) -> float:
        """One of this model's results, kept as its own; returns its usable time (ms; NaN: none)."""
        time_ms = result.time_ms if result.status == Status.OK and usable(result.time_ms) else math.nan
        self.own_seen[result.config_id] = True
        self.own_ms[result.config_id] = np.fmin(self.own_ms[result.config_id], time_ms)
        return time_ms

    def searched(self) -> None:
        """This model's search has ended: what it was told goes out, then that no more will come."""
        self.trade()
        self.ended = True
        for g in self.peers:
            self.link.send(g, _Searched())

    def portable(self, n: int) -> list[int] | None:
        """What every model times at its end: the ``n`` best portable candidates (model/portable.py,
        ``ranked_candidates``), then each model's own best. Known once every other model's search has
        ended; None until then. Every leader then holds the same times, so each ranks alike."""
        if self._ranked is None:
            self._take(self.link.arrived())
            if self._searched.issuperset(self.peers):  # the ranking is the same in any order of the models
                times = [self.own_ms, *(p.time_ms for p in self.peers.values())]
                ranked = ranked_candidates(times, n)
                bests = [int(np.nanargmin(t)) for t in times if np.isfinite(t).any()]
                self._ranked = list(dict.fromkeys(ranked + sorted(bests)))
        return self._ranked

    def trade(self) -> Prior | None:
        """Send what was shared since the last trade, take in what arrived, and return the others'
        results as a prior where they changed; None otherwise."""
        if self._outgoing:
            configs, times = zip(*self._outgoing)
            self._outgoing = []
            for g in self.peers:
                self.link.send(g, _Measured(tuple(configs), tuple(times)))
        self._take(self.link.arrived())
        if not self._new or self._own < OWN_RESULTS_FIRST:
            return None
        self._new = False
        return self._prior()

    def passed(self, ids: Iterable[int]) -> dict[int, float]:
        """Of ``ids``, those that passed on this model, with their best time here (ms)."""
        return {i: float(self.own_ms[i]) for i in ids if math.isfinite(self.own_ms[i])}

    def _take(self, arrived: list[tuple[int, Any]]) -> None:
        """Each peer's results onto this space's ids, keeping the best time of each."""
        for g, message in arrived:
            if isinstance(message, (_Searched, _Done)):
                self._searched.add(g)
                continue
            if not message.configs:
                continue
            rows = [[index.get(v, -1) for index, v in zip(self._index, config)] for config in message.configs]
            ids = self.space.id_of(np.array(rows, dtype=np.int64))
            time_ms = np.array(message.time_ms, dtype=np.float64)
            kept = (ids >= 0) & np.isfinite(time_ms)
            np.fmin.at(self.peers[g].time_ms, ids[kept], time_ms[kept])
            self._new = True

    def _prior(self) -> Prior:
        """One source per other group, NaN where it has no usable time yet, so that the sources are
        the same at every call (``Strategy.learn_prior``)."""
        peers = self.peers.values()
        sources = tuple(replace(p.source, matched=int(np.isfinite(p.time_ms).sum())) for p in peers)
        return Prior(sources, tuple(p.time_ms.copy() for p in peers))


@dataclass(frozen=True)
class _Searched:
    """A leader's search has ended: no more results will come, though its group still works."""


@dataclass(frozen=True)
class _Done:
    """A leader's last message: its group's run is over, and no more results will come."""


class MpiLink:
    """``Link`` over a communicator of the leaders, whose rank ``g`` leads group ``g``."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self._sending: list[MPI.Request] = []
        self._done: set[int] = set()  # the leaders that said they are done

    def send(self, peer: int, message: Any) -> None:
        self._sending = [r for r in self._sending if not r.Test()]
        self._sending.append(self.comm.isend(message, dest=peer, tag=_SHARE_TAG))

    def arrived(self) -> list[tuple[int, Any]]:
        status = MPI.Status()
        taken = []
        while (message := self.comm.improbe(MPI.ANY_SOURCE, _SHARE_TAG, status)) is not None:
            source, got = status.Get_source(), message.recv()
            if isinstance(got, _Done):
                self._done.add(source)
            taken.append((source, got))
        return taken

    def leave(self) -> None:
        """Say this leader is done, take in the others' messages until each said so, and wait until
        each took this one's: none is then left unreceived when MPI finishes. MPI keeps a sender's
        messages in order, so a leader's ``_Done`` comes after all its results."""
        others = [g for g in range(self.comm.size) if g != self.comm.rank]
        for g in others:
            self.send(g, _Done())
        for pause_s in pauses():
            self.arrived()
            self._sending = [r for r in self._sending if not r.Test()]
            if self._done.issuperset(others) and not self._sending:
                return
            time.sleep(pause_s)


@dataclass(frozen=True)
class Split:
    """This rank's group: the transport of its ranks, and, on its leader, the link to the others."""

    group: int
    transport: MpiTransport
    link: MpiLink | None

    def free(self) -> None:
        """Free the group's and the leaders' communicators, once every group has ended: none is
        then left for MPI to finish, nor a send on them."""
        self.transport.settle(SETTLE_S)
        self.transport.comm.Free()
        if self.link is not None:
            self.link.comm.Free()


def split(world: MpiTransport, groups: Groups) -> Split:
    """Each rank's group's communicator, and the leaders' one. Collective over the world."""
    group = groups.of_rank[world.rank]
    transport = MpiTransport(world.comm.Split(group, world.rank), world.watch)
    leading = transport.rank == 0
    leaders = world.comm.Split(0 if leading else MPI.UNDEFINED, group)
    return Split(group, transport, MpiLink(leaders) if leading else None)


def wait_for_all(world: MpiTransport) -> None:
    """Every rank waits until every group has ended. The heartbeats still run meanwhile: a group's
    ranks that left early would otherwise look silent to the world's rank 0."""
    request = world.comm.Ibarrier()
    for pause_s in pauses():
        if request.Test():
            return
        time.sleep(pause_s)
