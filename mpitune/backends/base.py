"""What the scheduler needs from a backend, and helpers every backend shares."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mpitune.model.judging.racing import Race
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

log = logging.getLogger(__name__)


@dataclass
class Compiled:
    """One configuration compiled: what to load, or why there is nothing to load.

    A compile worker or the process that measures may have made it.
    """

    config_id: int
    artifact: bytes | str = b""  # a CUDA image (cubin or PTX), or a shared library's path
    entry: str = ""  # the symbol of the kernel in the artifact (lowered name of a template)
    symbols: dict[str, str] | None = None  # constant memory name -> symbol in the artifact
    status: Status | None = None  # None when compiled; else the configuration's status (compile_error, ...)
    error: str = ""
    started: float = 0.0  # time.perf_counter() readings of the process that compiled
    finished: float = 0.0

    @property
    def compile_s(self) -> float:
        return self.finished - self.started


# A picklable function of one configuration's Work -> Compiled that runs in any process: what a
# backend hands out so that configurations can be compiled ahead (compile_ahead.py).
Compiler = Callable[[Work], Compiled]


@dataclass
class Draft:
    """What a backend learns of one configuration while it measures it: compile, verify, time.

    It is the one mutable form of a result. It stays inside the backend, and ``run`` returns
    it frozen as a ``Result``.
    """

    config_id: int
    status: Status = Status.OK
    time_ms: float = float("nan")
    times_ms: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    raced: bool = False
    throttled: str = ""
    observed: dict[str, float] = field(default_factory=dict)
    first_ms: float = float("nan")  # the verified (first) launch's time, where it was timed

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def fail(self, status: Status, error: str) -> None:
        self.status, self.error = status, error

    def set_times(self, times_ms: list[float], raced: bool) -> None:
        """The timed launches, and their median as the time."""
        self.times_ms, self.raced, self.time_ms = times_ms, raced, median_ms(times_ms)

    def result(self) -> Result:
        """The frozen result, field by field by name; lists and dicts copied as tuples and dicts.

        A field is declared here as in ``Result`` (tests/backends/test_draft.py holds the two
        together).
        """
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["times_ms"], values["observed"] = tuple(self.times_ms), dict(self.observed)
        return Result(**values)


def timed(compile_one: Callable[[], Compiled]) -> Compiled:
    """Run a compile step and stamp it with this process' monotonic clock."""
    started = time.perf_counter()
    compiled = compile_one()
    compiled.started, compiled.finished = started, time.perf_counter()
    return compiled


class Backend(ABC):
    """One device, owned by one rank.

    ``prepare`` runs once per run: it uploads the arguments and finds the device. ``run``
    compiles, verifies and times one configuration. It never raises for a bad configuration:
    failures come back as a ``Result`` status. A configuration costs 1 + ``iterations``
    launches. The first, on freshly reset outputs, is verified and is also the warm-up. It is
    timed on its own (``Result.first_ms``), not among ``times_ms``. With a ``race``, timing
    stops early for a configuration clearly slower than the best (model/judging/racing.py).
    Under the default rule that may be on the first launch already (``timed_launches``). Work
    is recorded as phases on the given timeline, which also fills the ``*_s`` fields.
    """

    device_name: str = "unknown"  # the model: part of what defines a problem's results
    device_detail: str = ""  # which device exactly (index, PCI bus, UUID), for the record
    # Set when the device can no longer be trusted (a lost CUDA context): the scheduler then
    # stops giving this rank work and ends the run, rather than record garbage.
    fatal_error: str = ""
    # Set by a caller that wants a configuration's outputs (``mpitune.run_kernel``): ``run``
    # then leaves in ``outputs`` host copies of the arguments as its first, untimed launch left
    # them, one entry per argument (scalars as given). Off while tuning: it would cost a copy
    # of every array for every configuration.
    keep_outputs: bool = False
    outputs: list | None = None

    def prepare(self) -> None:  # noqa: B027 (a hook: a backend with nothing to set up leaves it)
        """Set up once per run: upload the arguments, find the device."""

    def compiler(self) -> Compiler | None:
        """What compiles one configuration in another process; None if nothing compiles.
        Valid after ``prepare`` (a GPU backend knows its architecture only then)."""
        return None

    def deadline_s(self) -> float | None:
        """How long one configuration may take before it is given up (None: no limit)."""
        return None

    @abstractmethod
    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        """Measure one configuration: compile (unless given), verify, time.

        Never raises for a bad configuration: a failure is the result's status.

        Args:
            work: the configuration and what the spec's callables give for it.
            timeline: where its phases are recorded.
            compiled: its kernel compiled ahead elsewhere; None: compile it here.
            race: what its timing races against; None: every iteration is timed.

        Returns:
            The frozen result, with its phases' seconds.
        """

    @abstractmethod
    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """Time each candidate of ``retime`` once per round, interleaved (``interleaved``).

        Args:
            retime: the candidates and the rounds.
            timeline: where the work is recorded.
            compiled: candidates compiled ahead elsewhere, by config_id; missing ones are
                compiled here.
            stopping: asked before each launch; once it says the run is ending, the launches
                made are kept and the rest is left to a resumed run.

        Returns:
            Exactly ``rounds`` x ``len(work)`` launches, fewer after a stop.

        Why: the search timed each candidate once, back to back, so its median carries one
        moment's drift and one device's bias. Confirmation times the best few again in turn,
        all loaded at once, one launch per candidate per round, so that drift and bias hit them
        all alike and can be taken out. They were verified during the search, so nothing is
        verified again; but each gets one untimed warm-up launch after loading (on arguments
        reset as ``run`` resets them), so that no candidate's first timed launch pays for its
        loading. Never raises for a bad candidate: its launches come back NaN. Records the
        work on the timeline as phase ``retime.phase`` (config_id -1) plus "compile" rows per
        candidate compiled here."""

    def close(self) -> None:  # noqa: B027 (a hook: a backend that holds nothing leaves it)
        """Give back what ``prepare`` took."""


def shorten(text: str, max_lines: int = 12, max_chars: int = 2000) -> str:
    """Keep the head of a compiler log: the first errors are the ones that explain."""
    lines = text.strip().splitlines()
    short = "\n".join(lines[:max_lines])
    if len(lines) > max_lines:
        short += f"\n... ({len(lines) - max_lines} more lines)"
    return short[:max_chars]


def timed_launches(
    launch_ms: Callable[[], float], iterations: int, race: Race | None, first_ms: float = math.nan
) -> tuple[list[float], bool]:
    """Up to ``iterations`` timings of ``launch_ms``, and whether the race stopped them early.

    ``launch_ms`` makes one launch and gives its time in ms. A configuration that lost on its
    last launch got them all. One whose verified launch (``first_ms``) already lost gets none
    (``Race.lost_first``). Its one time is then that launch's, so the file and the strategies
    see it above the bound. The race's verdict after each launch costs the same however many
    came before (``Standing``).
    """
    if race is not None and race.lost_first(first_ms):
        return [first_ms], True
    standing = None if race is None else race.standing(iterations)
    times: list[float] = []
    while len(times) < iterations:
        time_ms = launch_ms()
        times.append(time_ms)
        if standing is not None and standing.add(time_ms) and len(times) < iterations:
            return times, True
    return times, False


# A candidate of a confirmation may be dropped once it has this many launches, all of them
# beyond DROP_MARGIN x the slowest launch of the fastest candidate (``clearly_slower``).
DROP_AFTER_ROUNDS = 3
DROP_MARGIN = 1.05


def interleaved(
    ids: Sequence[int], rounds: int, launch_ms: Callable[[int], float], stopping: Callable[[], bool] | None = None
) -> list[Launch]:
    """``rounds`` rounds of one launch per candidate, round r in the order of ``ids`` rotated by r.

    So no candidate always follows the same one, nor always comes first after a pause.
    ``launch_ms(i)`` launches the candidate ``ids[i]`` once and gives its time. A candidate whose
    launch raises gets NaN for it and for the rest: it is not launched again. One bad candidate
    must not cost the others their confirmation. One clearly slower than the fastest gets NaN
    for the rounds left, unlaunched (``clearly_slower``). ``stopping()`` is asked before each
    launch. Once it says so, the launches made so far are returned: a stop near a job's time
    limit must not wait for every round.
    """
    failed: set[int] = set()
    done: dict[int, list[float]] = {i: [] for i in range(len(ids))}
    launches: list[Launch] = []
    count = len(ids)
    for round_ in range(rounds):
        if round_ >= DROP_AFTER_ROUNDS:
            failed |= clearly_slower(done)
        for k in range(count):
            if stopping is not None and stopping():
                return launches
            i = (k + round_) % count
            time_ms = math.nan
            if i not in failed:
                try:
                    time_ms = float(launch_ms(i))
                except Exception as exc:
                    log.warning("configuration %d: its launch failed while re-timed: %s", ids[i], exc)
                    failed.add(i)
            done[i].append(time_ms)
            launches.append(Launch(ids[i], round_, time_ms))
    return launches


def clearly_slower(done: Mapping[int, Sequence[float]]) -> set[int]:
    """The candidates whose every launch took longer than the fastest's slowest, with a margin.

    The fastest is the candidate with the lowest median on this device; the margin is
    ``DROP_MARGIN``. No interval of theirs could reach the winner's. So their remaining rounds
    would only cost device time. Where most candidates are clearly slower, their rounds are most
    of the confirmation's cost (docs/performance.md, "Confirmation").
    """
    times = {i: [t for t in ts if math.isfinite(t)] for i, ts in done.items()}
    timed = {i: ts for i, ts in times.items() if ts and len(ts) == len(done[i])}
    if not timed:
        return set()
    best = min(timed, key=lambda i: (float(np.median(timed[i])), i))
    bound_ms = DROP_MARGIN * max(timed[best])
    return {i for i, ts in timed.items() if min(ts) > bound_ms}


def unlaunched(retime: Retime) -> list[Launch]:
    """Every launch of ``retime`` NaN, in the order it would have been made.

    A backend answers so when it could launch none: its device lost, its worker gone.
    """
    return interleaved(retime.ids, retime.rounds, lambda i: math.nan)


def median_ms(times_ms: Sequence[float]) -> float:
    """``np.median`` of the launches, by sorting them in Python; NaN if any is, or none were made.

    A configuration's few dozen launches sort faster than ``np.median`` starts, and a replay
    paid that per configuration. The middle two are averaged as ``np.median`` does.
    """
    n = len(times_ms)
    if not n or any(t != t for t in times_ms):
        return float("nan")
    ordered = sorted(map(float, times_ms))
    half = n // 2
    # As numpy sums from +0.0 (a median of -0.0 is 0.0), so does this.
    return 0.0 + ordered[half] if n % 2 else (0.0 + ordered[half - 1] + ordered[half]) / 2
