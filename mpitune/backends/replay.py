"""Answers each configuration from measured data instead of running a kernel.

Time is emulated. The rank's simulated clock advances by the recorded compile, verify and
benchmark durations. It also advances by what the recorded run spent besides them: start-up,
rank 0's own work, the gaps between phases (model/replay_clock.py, ``RecordedRun``). Compiles go
to the simulated compile workers (process/simulated_compile.py). So a replay on N ranks reports
the wall time the real run would have taken. A time limit applies in that simulated time.
Strategies are thus compared on real search spaces in seconds, with their real parallelism.

Every rank replays the same recorded device, which real ranks never are. (Files measured on
several device models are replayed a file a rank, in turn: ``ReplaySource.replayed_by``.) Each
GPU of a model is a little faster or slower than the next, and each timing is one draw of its
noise. So a replay can be biased: each rank's times scaled by its own factor (``bias_factor``).
And candidates timed again (``retime``) can be noisy: each launch is drawn anew from the
recorded ones. What must cope with both (confirmation) is then tried on real data with a known
truth; see docs/analysis.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mpitune.backends.base import Backend, Compiled, Compiler, Draft, timed_launches
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.model.judging.racing import Race
from mpitune.model.problem import Kernel, ReplaySource
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work
from mpitune.store import measured
from mpitune.store.measured import MeasuredData, Measurement

# Which random stream a draw takes from the run's seed: a rank's factor, or a retime's launches.
_BIAS_STREAM, _RETIME_STREAM = 0, 1


def bias_factor(replay: ReplaySource, rank: int) -> float:
    """What rank ``rank``'s recorded times are multiplied by.

    That is its given factor, or one drawn for it from N(1, sd) with the run's seed. A draw is
    redrawn while not positive: no device runs in no time. Without bias it is 1.0. The draw
    takes the seed and the rank alone. So every rank finds its own without knowing how many
    there are, and a run is reproducible.
    """
    if replay.device_bias:
        return float(replay.device_bias[rank % len(replay.device_bias)])
    if not replay.device_bias_sd:
        return 1.0
    rng = np.random.default_rng([replay.seed, rank, _BIAS_STREAM])
    while (factor := float(rng.normal(1.0, replay.device_bias_sd))) <= 0:
        pass
    return factor


class _Loaded:
    """Measured data as every rank's backend reads it, with its lookup by configuration.

    Both are made once for all ranks (``measured.load_shared``).
    """

    def __init__(self, data: MeasuredData):
        self.data, self.lookup = data, data.lookup()
        lost = [m.benchmark_s for m in data.measurements if m.raced and m.launches <= 1 and not m.twice]
        self.first_pass_s = float(np.median(lost)) if lost else 0.0
        # Each rank's launches timed again, sorted out once: not every simulated rank over all of them.
        self.retimed: dict[int, dict[tuple[str, tuple], list[float]]] = {}
        for (rank, purpose, config), times in data.retimed.items():
            self.retimed.setdefault(rank, {})[(purpose, config)] = times


_LOADED: list[_Loaded] = []  # the last data loaded, with its lookup


def _loaded(path: str) -> _Loaded:
    """The data of ``path`` with its lookup, made once per process while the file is unchanged."""
    data = measured.load_shared(path)
    if not _LOADED or _LOADED[0].data is not data:
        _LOADED[:] = [_Loaded(data)]
    return _LOADED[0]


class ReplayBackend(Backend):
    def __init__(self, problem: Kernel, rank: int = 0):
        assert problem.replay is not None, "a replay backend answers from measured data"
        replay = problem.replay.replayed_by(rank)  # of several files, this rank's
        loaded = _loaded(replay.path)
        data = loaded.data
        self.names = list(problem.tune_params)
        self.lookup = loaded.lookup
        # The same name on every rank of a file, bias or not: the ranks replay its device model.
        self.device_name = f"{data.device_name or 'unknown device'} (replayed)"
        self.rank, self.seed = rank, replay.seed
        self.factor = bias_factor(replay, rank)
        self.retimes = 0  # the orders of launches retimed so far: each draws anew
        # A run that raced recorded only the launches each configuration got: replayed as it raced.
        self.as_recorded = replay.run.raced
        # What the replayed rank spent between phases per configuration, charged in three parts
        # (before verifying, before and after timing), each as short as the gaps it stands for.
        self.gap_s = replay.run.rank_gap_s(rank) / 3
        self.retime_compile_s = replay.run.retime_compile_s
        self.host_verified = replay.run.host_verified
        # A first launch that lost cost its benchmark phase this long (racing's own overhead): a
        # deferred configuration's first pass, not recorded, is charged as much.
        self.first_pass_s = loaded.first_pass_s
        self.retimed = loaded.retimed.get(rank, {})  # shared by the rank's backends: only read
        self._retimes_taken: dict[tuple[str, tuple], int] = {}  # of ``retimed``, how many launches so far

    def compiler(self) -> Compiler:
        """The recorded compile: its time (``Compiled.compile_s``) and whether it failed.

        The simulated compile workers take it (process/simulated_compile.py). A configuration
        timed again (``Work.again``) takes what such compiles took, where known
        (``retime_compile_s``). From the kernel cache, that is a load.
        """
        return self._recorded_compile

    def _recorded_compile(self, work: Work) -> Compiled:
        m = self._measurement(work)
        if m is None:
            return Compiled(work.config_id, status=Status.INVALID, error="not in the measured data")
        failed = m.status == Status.COMPILE_ERROR
        compile_s = self.retime_compile_s if work.again and self.retime_compile_s is not None else m.compile_s
        return Compiled(
            work.config_id, status=m.status if failed else None, error=m.error if failed else "", finished=compile_s
        )

    def _measurement(self, work: Work) -> Measurement | None:
        return self.lookup.get(tuple(work.config[n] for n in self.names))

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        """The recorded outcome.

        One compiled ahead (``compiled``, by the simulated workers) costs no compile here: the
        rank waited for it already, if at all. Replaying a run that raced, each configuration
        gets the launches it got then. Else, with a ``race``, the recorded launches are raced in
        the order they were timed. Only the benchmark time of the launches made is spent.
        """
        config_id = work.config_id
        m = self._measurement(work)
        if m is None:
            return Result(config_id, Status.INVALID, error="not in the measured data")
        draft = Draft(config_id, m.status, error=m.error, compile_s=m.compile_s)
        if compiled is None:
            with timeline.phase("compile", config_id):
                timeline.clock.advance(m.compile_s)
        if m.status == Status.COMPILE_ERROR:
            return draft.result()
        # A biased device takes its factor times as long to benchmark too; the compiler and
        # the verification run on the host, and the observed values (energy, counters) are
        # kept as recorded: they are no times to scale.
        benchmark_s = m.benchmark_s * self.factor
        if m.status == Status.OK:
            if self.as_recorded:
                benchmark_s = self._recorded_launches(draft, m, race)
            else:
                benchmark_s = self._race(draft, m, race, benchmark_s)
        timeline.clock.advance(self.gap_s)
        with timeline.phase("verify", config_id):
            timeline.clock.advance(m.verify_s)
        timeline.clock.advance(self.gap_s)
        with timeline.phase("benchmark", config_id):
            timeline.clock.advance(benchmark_s)
        timeline.clock.advance(self.gap_s)
        draft.verify_s, draft.benchmark_s = m.verify_s, benchmark_s
        return draft.result()

    def _race(self, draft: Draft, m: Measurement, race: Race | None, benchmark_s: float) -> float:
        """Race the recorded launches: the benchmark seconds of those made."""
        factor = self.factor
        # The data keeps no verification launch (Kernel Tuner's first launch is an untimed
        # warm-up): the first recorded launch stands in for it, and the recorded launches
        # are then raced in order, all of them, as the timed ones.
        draft.first_ms = m.times_ms[0] * factor if m.times_ms else m.time_ms * factor
        recorded = iter(m.times_ms)
        draft.set_times(*timed_launches(lambda: next(recorded) * factor, len(m.times_ms), race, draft.first_ms))
        if not draft.raced:
            draft.time_ms = m.time_ms * factor  # the recorded median, as the run that measured it said
        # A raced configuration gets no observation window either (as on a GPU).
        draft.observed = {} if draft.raced else dict(m.observed)
        if race is not None and race.lost_first(draft.first_ms):
            return 0.0  # stopped on its first launch: no timed launch made
        if m.times_ms:
            return benchmark_s * len(draft.times_ms) / len(m.times_ms)
        return benchmark_s

    def _recorded_launches(self, draft: Draft, m: Measurement, race: Race | None) -> float:
        """As the replayed run raced: the launches the configuration got then, and their seconds.

        Its first launch is not recorded, except where it lost on it. So the run's race cannot
        be run again; what it decided is replayed instead. A chunk's first pass
        (``Race.defers_all``) defers exactly those the run measured twice. It keeps the rest as
        they were recorded.
        """
        factor = self.factor
        if race is not None and race.defers_all and m.twice:
            draft.first_ms = 0.0
            draft.set_times([0.0], True)
            return self.first_pass_s * factor
        draft.set_times([t * factor for t in m.times_ms], m.raced)
        draft.time_ms = m.time_ms * factor
        draft.observed = {} if m.raced else dict(m.observed)
        return m.benchmark_s * factor

    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """Each candidate launched once per round, interleaved.

        The replayed run may have timed it again on this rank, for the same purpose. Its
        launches are then those it made, in order: the device's own noise of that moment. Else
        each launch is drawn from its search's recorded ones (its recorded time where none were
        kept). Either way this rank's factor scales them: a real device's noise around the
        data's truth.

        A round draws one place in the recorded launches, and every candidate takes its launch
        from there. The recorded launches are in the order they were timed. So one place stands
        for one moment of a drifting device, which hits every candidate of a round alike. On a
        device, interleaving does the same. A candidate not in the data, or not ok in it, has
        NaN launches.

        The draws are seeded from the run's seed, this rank, its orders retimed so far and the
        candidates. So a replay repeats itself exactly. And an order retimed again is timed
        anew, as a device would: a copy of its first launches would look like new evidence.

        Simulated time first takes the compiles of the candidates not in ``compiled`` (phase
        compile). Each is as long as the replayed run's such compiles, else its recorded one.
        Then come the launches and each candidate's loading and warm-up (``_warm_up_s``), in
        one phase named for the order (``Retime.phase``). ``stopping`` is not asked: the
        launches are numbers, made at once.
        """
        compiled = compiled or {}
        rng = np.random.default_rng([self.seed, self.rank, _RETIME_STREAM, self.retimes, *retime.ids])
        self.retimes += 1
        places = rng.random(retime.rounds)
        drawn: dict[int, Sequence[float]] = {}
        compile_s = prepared_s = 0.0
        for w in retime.work:
            m = self.lookup.get(tuple(w.config[n] for n in self.names))
            if m is not None and w.config_id not in compiled:
                compile_s += m.compile_s if self.retime_compile_s is None else self.retime_compile_s
            if m is not None:
                prepared_s += self._warm_up_s(m)
            drawn[w.config_id] = self._recorded_retime(retime, w) or self._draws(m, places)
        n = len(retime.work)
        launches = [
            Launch(w.config_id, r, drawn[w.config_id][r])
            for r in range(retime.rounds)
            for w in (retime.work[(i + r) % n] for i in range(n))
        ]
        launched_s = sum(x.time_ms for x in launches if not math.isnan(x.time_ms)) / 1000.0
        if compile_s:
            with timeline.phase("compile"):
                timeline.clock.advance(compile_s)
        with timeline.phase(retime.phase):
            timeline.clock.advance(prepared_s + launched_s)
        return launches

    def _warm_up_s(self, m: Measurement) -> float:
        """A candidate's loading and warm-up launch before it is timed again.

        It is as long as its recorded verification: an mpitune run verifies on the device, a
        launch and a compare. Kernel Tuner's verification also checks the answer on the host
        (``RecordedRun.host_verified``), which timing again does not repeat. There it is no
        longer than one launch (docs/performance.md, "How work is handed out").
        """
        if not self.host_verified:
            return m.verify_s
        launch_ms = m.times_ms[0] if m.times_ms else m.time_ms
        return min(m.verify_s, launch_ms * self.factor / 1e3) if math.isfinite(launch_ms) else m.verify_s

    def _recorded_retime(self, retime: Retime, work: Work) -> list[float]:
        """The next launches this rank made of ``work`` for the same purpose, scaled by its factor.

        There are ``retime.rounds`` of them; [] when the replayed run made no more.
        """
        key = (retime.phase, tuple(work.config[n] for n in self.names))
        taken = self._retimes_taken.get(key, 0)
        recorded = self.retimed.get(key, [])[taken : taken + retime.rounds]
        if len(recorded) < retime.rounds:
            return []
        self._retimes_taken[key] = taken + retime.rounds
        return [t * self.factor for t in recorded]

    def _draws(self, m: Measurement | None, places: np.ndarray) -> Sequence[float]:
        """One launch of ``m``'s records per round, at each round's place in them; NaN where none.

        A place is a fraction of the way through the recorded launches.
        """
        if m is None or m.status != Status.OK:
            return [math.nan] * len(places)
        recorded = np.asarray(m.times_ms or [m.time_ms], dtype=float)
        at = np.minimum((places * len(recorded)).astype(int), len(recorded) - 1)
        return [float(t) * self.factor for t in recorded[at]]


CAPABILITIES = Capabilities(
    lang="replay",
    aliases=(),
    module="replay",
    device=DeviceKind.NONE,
    selectable=False,
    kernel_name=re.compile(r".*"),
    kernel_name_rule="any name",
    isolate=False,
    simulated_clock=True,
)


def create(kernel: Kernel, workdir: str, local_rank: int = 0, rank: int | None = None) -> Backend:
    """Measured data answers: ``workdir`` is not used, and no device is chosen.

    ``rank``, the simulated device's place in the job, picks its bias (None: ``local_rank``).
    """
    return ReplayBackend(kernel, local_rank if rank is None else rank)
