"""Answers each configuration from measured data instead of running a kernel.

Time is emulated: the rank's simulated clock advances by the recorded compile, verify and
benchmark durations, so a replay on N ranks reports the wall time the real run would have
taken, and a time limit applies in that simulated time. Strategies can thus be compared on
real search spaces in seconds, with the parallelism they would really get.
"""

from __future__ import annotations

import re

from mpitune.backends.base import Backend, Compiled, Draft, timed_launches
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.model.racing import Race
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work
from mpitune.store import measured


class ReplayBackend(Backend):
    def __init__(self, problem):
        data = measured.load(problem.replay_source)
        self.names = list(problem.tune_params)
        self.lookup = data.lookup()
        self.device_name = f"{data.device_name or 'unknown device'} (replayed)"

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        """The recorded outcome; with a ``race``, the recorded launches are raced in the order they
        were timed and only the benchmark time of the launches made is spent."""
        config_id = work.config_id
        m = self.lookup.get(tuple(work.config[n] for n in self.names))
        if m is None:
            return Result(config_id, Status.INVALID, error="not in the measured data")
        draft = Draft(config_id, m.status, error=m.error, compile_s=m.compile_s)
        with timeline.phase("compile", config_id):
            timeline.clock.advance(m.compile_s)
        if m.status == Status.COMPILE_ERROR:
            return draft.result()
        benchmark_s = m.benchmark_s
        if m.status == Status.OK:
            recorded = iter(m.times_ms)
            draft.set_times(*timed_launches(lambda: next(recorded), len(m.times_ms), race))
            if not draft.raced:
                draft.time_ms = m.time_ms  # the recorded median, as the run that measured it said
            # A raced configuration gets no observation window either (as on a GPU).
            draft.observed = {} if draft.raced else dict(m.observed)
            benchmark_s *= len(draft.times_ms) / len(m.times_ms) if m.times_ms else 1.0
        with timeline.phase("verify", config_id):
            timeline.clock.advance(m.verify_s)
        with timeline.phase("benchmark", config_id):
            timeline.clock.advance(benchmark_s)
        draft.verify_s, draft.benchmark_s = m.verify_s, benchmark_s
        return draft.result()


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


def create(problem, workdir: str, local_rank: int = 0) -> Backend:
    """Measured data answers: neither ``workdir`` nor ``local_rank`` is used."""
    return ReplayBackend(problem)
