"""What is tuned and how: the records the spec loader produces and every layer reads."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mpitune.model.identity import ProblemIdentity
from mpitune.model.judging.racing import RaceRule
from mpitune.model.kernel_extras import KernelExtras
from mpitune.model.objective import Aim
from mpitune.model.replay_clock import RecordedRun
from mpitune.model.restrictions import Restriction
from mpitune.model.work import DEFAULT_CANDIDATES


@dataclass(frozen=True)
class ReplaySource:
    """What answers for the kernel in a replay: measured data, on simulated devices.

    Made once by the spec loader (spec/replay.py). Every rank's replay backend reads it.
    """

    path: str  # the measured data: a Kernel Tuner cache or an mpitune file
    # Each simulated device's bias on the recorded times (backends/replay.py), so that
    # confirmation can be tried on devices that disagree. Given factors (rank r takes
    # ``device_bias[r % len]``), or a factor per rank drawn from N(1, ``device_bias_sd``).
    device_bias: tuple[float, ...] = ()
    device_bias_sd: float = 0.0
    # The run's seed: it draws the factors and the launches a replay times again. The workers
    # never see the run's settings, so it travels here.
    seed: int = 0
    # What the simulated clock charges besides each configuration's durations.
    run: RecordedRun = field(default_factory=RecordedRun)
    # A replay of several files of one kernel and space, each measured on another device model
    # (``replay CACHE1 CACHE2 ...``): all of them, in the order given. World rank r replays
    # ``files[r % k]``, so the job's ranks are that many device models. Empty: ``path`` alone.
    files: tuple[MeasuredFile, ...] = ()

    def file_of(self, rank: int) -> int:
        """The file world rank ``rank`` replays, in ``files``' order (0 for a replay of one)."""
        return rank % len(self.files) if self.files else 0

    def replayed_by(self, rank: int) -> ReplaySource:
        """What world rank ``rank`` replays: its file's path and run, with the same bias and seed."""
        if not self.files:
            return self
        chosen = self.files[self.file_of(rank)]
        return replace(self, path=chosen.path, run=chosen.run)


@dataclass(frozen=True)
class MeasuredFile:
    """One measured file of a replay of several, and what its recorded run spent besides its configurations."""

    path: str
    run: RecordedRun = field(default_factory=RecordedRun)


@dataclass(frozen=True)
class Kernel:
    """What every rank needs to measure: the kernel, its data and how to launch and time it.

    The only part of a problem the worker ranks receive (``Problem.for_workers``). In a replay,
    measured data answers for the kernel (``replay``).
    """

    spec_path: str
    kernel_name: str
    kernel_source: str
    lang: str
    problem_size: tuple[int, ...]
    arguments: list[Any]  # numpy arrays and scalars, broadcast as buffers (scheduling/comm.py)
    answer: list[Any] | None
    atol: float
    tune_params: dict[str, list[Any]]
    grid_div: dict[str, Any] = field(default_factory=dict)
    block_size_names: tuple[str, ...] = ("block_size_x", "block_size_y", "block_size_z")
    iterations: int = 7
    # Names of the values besides time that the backend observes for every configuration,
    # and Kernel Tuner's name for each where it has another (``nvml_energy`` -> ``energy_j``).
    observed_names: tuple[str, ...] = ()
    observed_aliases: dict[str, str] = field(default_factory=dict)
    observers: tuple[Any, ...] = ()  # e.g. observers.NVMLObserver; they travel
    cache_path: str = ""  # where GPU settings to restore after a crash are kept beside (nvml_control.py)
    compiler_options: tuple[str, ...] = ()
    # Seconds one configuration may take (compile, verify, benchmark) before it is killed and
    # recorded as a timeout; None: derived from the configurations measured so far.
    timeout_s: float | None = None
    isolate: bool = True  # measure in a supervised worker process (see isolation.py)
    # defines, smem_args and cmem_args (kernel_extras.py); None when the spec uses none of them.
    extras: KernelExtras | None = None
    replay: ReplaySource | None = None  # what answers for the kernel in a replay; None otherwise

    def for_workers(self) -> Kernel:
        """Without the per-configuration callables of ``extras``: rank 0 resolves those."""
        return replace(self, extras=self.extras.for_workers()) if self.extras else self


@dataclass(frozen=True)
class Problem:
    """What is tuned, split by who needs it.

    Frozen: the spec loader makes it once (spec/load.py, spec/replay.py). Every rank measures
    the ``kernel``; the rest is rank 0's, which builds the search space and scores the results.
    """

    kernel: Kernel
    # Which configurations of the kernel's ``tune_params`` are valid; callables stay on rank 0.
    restrictions: tuple[Restriction | Callable[..., Any], ...] = ()
    # Replays only: the measured configurations, which are the whole space. Rank 0 alone
    # builds the space, so they stay here.
    configs: tuple[tuple[Any, ...], ...] | None = None
    # What is optimised (objective.py): its metrics are the spec's callables.
    aim: Aim = field(default_factory=Aim)
    # A replay of several files (``ReplaySource.files``): each file's problem as replayed alone, in
    # the same order. Rank 0's, as ``configs`` are: ``for_replay_source`` takes one of them.
    replayed: tuple[Problem, ...] = ()

    def for_workers(self) -> Kernel:
        """What a worker rank receives: the kernel alone."""
        return self.kernel.for_workers()

    def identity(self, devices: Sequence[str] | None = None) -> ProblemIdentity:
        """What defines the problem, measured on ``devices`` (the device models of a run)."""
        kernel, replay = self.kernel, self.kernel.replay
        return ProblemIdentity(
            kernel_name=kernel.kernel_name,
            kernel_source=kernel.kernel_source,
            lang=kernel.lang,
            problem_size=tuple(kernel.problem_size),
            arguments=tuple(_describe(a) for a in kernel.arguments),
            tune_params={k: tuple(plain(v) for v in vs) for k, vs in kernel.tune_params.items()},
            restrictions=tuple(r.text if isinstance(r, Restriction) else callable_text(r) for r in self.restrictions),
            iterations=kernel.iterations,
            grid_div={k: v if isinstance(v, (str, type(None))) else tuple(v) for k, v in kernel.grid_div.items()},
            block_size_names=tuple(kernel.block_size_names),
            compiler_options=tuple(kernel.compiler_options),
            replay_source=replay.path if replay else "",
            observed_names=tuple(kernel.observed_names),
            device_bias=(replay.device_bias or None) if replay else None,
            device_bias_sd=(replay.device_bias_sd or None) if replay else None,
            devices=None if devices is None else tuple(devices),
            **(kernel.extras.identity() if kernel.extras else {}),
        )


def for_replay_source(problem: Problem, index: int) -> Problem:
    """The problem whose primary measured data is file ``index`` of a replay of several.

    Its kernel (name, sizes, launches, observed values) and configurations are that file's. Its
    replay source's ``path`` and ``run`` are too, so the identity and file a leader of that file's
    ranks records are that file's. The restrictions, the aim and the files each world rank replays
    (``ReplaySource.files``) stay the same: a backend made from either problem replays alike.

    Args:
        problem: a replay as the loader made it (spec/replay.py), of one file or several.
        index: the file, in ``ReplaySource.files``' order: world rank r replays file r % k.

    Returns:
        That file's problem; ``problem`` itself where it replays one file (or none) and ``index`` is 0.

    Raises:
        IndexError: ``index`` names no file of the replay.
    """
    count = len(problem.replayed) or 1
    if not 0 <= index < count:
        raise IndexError(f"file {index} of a replay of {count}")
    replay = problem.kernel.replay
    if not problem.replayed or replay is None:
        return problem
    own = problem.replayed[index]
    return replace(problem, kernel=replace(own.kernel, replay=replay.replayed_by(index)), configs=own.configs)


class Schedule(enum.Enum):
    """How rank 0 hands out work on several ranks (docs/performance.md, "How work is handed
    out"): refilling each rank as it runs short keeps the ranks busier, but what the strategy
    knew at each ask then depends on timing; whole batches make the same search for a seed."""

    AUTO = "auto"  # the scheduler decides: refill on several ranks (scheduling/handouts.py, ``Policy.of``)
    BATCHES = "batches"  # one chunk per rank per batch, the strategy told batch by batch: reproducible for a seed
    REFILL = "refill"  # each rank holds its configuration and at most one more, refilled as results arrive

    def resolved(self, ranks: int) -> Schedule:
        """``refill`` on several ranks unless this says ``batches``; batches on one rank."""
        return Schedule.REFILL if ranks > 1 and self is not Schedule.BATCHES else Schedule.BATCHES


class Devices(enum.Enum):
    """What a job of several device models does (docs/running.md, "Several device models in one
    job"): refuse them (one model a job), or tune each model apart while they share results."""

    ONE = "one"  # one device model a job; --allow-mixed-devices runs several as if they were one
    EACH = "each"  # the ranks grouped by model: a search, a file and a confirmation each


DEPTH = 2  # orders a rank holds on several ranks: the one it measures and the next, so it never waits for rank 0


@dataclass(frozen=True)
class Dealing:
    """How a run hands out its work, from what its file records of it (the schedule, the ranks,
    the batch size, whether its ranks compiled in turn): the numbers the scheduler follows
    (scheduling/handouts.py, ``Policy``) and the one way to say them, which the run's first
    line and ``report`` both print."""

    schedule: Schedule  # BATCHES or REFILL, as resolved for the run
    ranks: int
    batch_size: int
    in_turn: bool = False  # no rank has compile workers

    @classmethod
    def of(cls, schedule: Schedule, ranks: int, batch_size: int, in_turn: bool = False) -> Dealing:
        """The schedule as resolved for ``ranks`` (``Schedule.resolved``)."""
        return cls(schedule.resolved(ranks), ranks, batch_size, in_turn)

    @property
    def per_rank(self) -> int:
        """Configurations per rank in a hand-out (refill: once costs are known)."""
        return max(1, self.batch_size // max(1, self.ranks))

    @property
    def depth(self) -> int:
        """Orders a refilled rank holds at most: the one it measures and the next (``DEPTH``), so
        that its compile workers compile the next while it measures; one chunk where it
        compiles in turn. Such a rank gains nothing from a queued chunk but hiding rank 0's
        answer, while the chunk's race is the best known when it was dealt, a whole chunk
        earlier: holding one keeps more of many replayed ranks busy (docs/performance.md, "How
        work is handed out"). A search that learns from every
        result gets one configuration a rank, whose race is as fresh either way."""
        one_chunk = self.schedule is Schedule.REFILL and self.in_turn and self.per_rank > 1
        return 1 if one_chunk else DEPTH

    @property
    def quorum(self) -> int:
        """Ranks that must want work before rank 0 asks, while any rank holds some: batches all of
        them; refill half (a strategy that learns from every result, asked that many at once) or
        an eighth (one that names its order in advance, whose chunks are dealt by cost among
        them; an eighth keeps more of many replayed ranks busy, docs/performance.md);
        each rank as it runs out where it holds one order (``depth``): it waits for nothing else."""
        if self.schedule is Schedule.BATCHES:
            return self.ranks
        if self.depth == 1:
            return 1
        return max(1, self.ranks // (2 if self.per_rank == 1 else 8))

    def describe(self) -> str:
        if self.schedule is Schedule.BATCHES:
            return f"batches of {self.batch_size}"
        if self.depth == 1:
            return f"refilled as each rank runs out (chunks of up to {self.per_rank} a rank)"
        hold = "holds" if self.quorum == 1 else "hold"
        return (
            f"refilled as ranks run short (chunks of up to {self.per_rank} a rank, dealt once {self.quorum} "
            f"of {self.ranks} ranks {hold} fewer than {DEPTH} orders)"
        )


@dataclass(frozen=True)
class RunSettings:
    """How to search: strategy, budget, cache and batching. Overridable from the command line.
    Frozen: made once, from the spec and the command line (spec/settings.py), and broadcast."""

    strategy: str = "brute_force"
    strategy_options: dict[str, Any] = field(default_factory=dict)
    max_fevals: int | None = None
    time_limit_s: float | None = None
    seed: int = 0
    cache_path: str = ""
    batch_size: int | None = None
    schedule: Schedule = Schedule.AUTO  # refill or batches on several ranks
    stop_file: str = ""  # stop as on a signal once this file exists (set by job scripts)
    allow_mixed_devices: bool = False  # ranks on different device models, timings not comparable
    devices: Devices = Devices.ONE  # each model its own search and file (scheduling/devices/models.py)
    # With ``devices`` each: the best portable candidates timed on every model at the end; 0: none.
    portable: int = 0
    # Stop timing configurations clearly slower than the best (model/judging/racing.py); only with time as
    # the objective.
    racing: bool = True
    race_rule: RaceRule = RaceRule.FIRST  # when a configuration's launches so far suffice to stop it
    # The best candidates timed again once the search ends (scheduling/devices/confirming.py); 0: none.
    confirm: int = DEFAULT_CANDIDATES
    # Every rank times a reference now and then, so that the search compares calibrated times
    # (scheduling/devices/calibrating.py); a device further from the others' than its noise plus
    # ``device_margin`` (a fraction) is flagged.
    calibrate: bool = True
    device_margin: float = 0.02
    # Processes per rank that compile configurations ahead while the device measures
    # (compile_ahead.py); None: derived from the cores each rank has, 0: compile in turn.
    compile_workers: int | None = None
    # The least rank 0 waits for a batch's reports before it calls a rank silent and ends the
    # run (scheduling/faults/deadlines.py): the flag's, else MPITUNE_RANK_DEADLINE_FLOOR_S's; None: 45 s.
    rank_deadline_floor_s: float | None = None
    # Measurements made elsewhere that the search starts from (model/prior.py): absolute paths of
    # mpitune files or Kernel Tuner caches, and whether one of another kernel name is taken.
    prior: tuple[str, ...] = ()
    prior_any_kernel: bool = False


def _describe(arg: Any) -> str:
    arr = np.asarray(arg)
    return f"{arr.dtype.str}{list(arr.shape)}"


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds, so that a problem's identity is the same
    whether the spec wrote ``4`` or ``np.int32(4)``."""
    return value.item() if isinstance(value, np.generic) else value


def callable_text(fn: Callable[..., Any]) -> str:
    """A callable's source, which is what a file records of it; its name where there is no source."""
    try:
        return inspect.getsource(fn).strip()
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))
