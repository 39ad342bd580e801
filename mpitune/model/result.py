"""The record of one measured configuration, shared by backends, strategies and the cache."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Every status a configuration can end with. Failures are results, not exceptions:
# strategies penalise them and the cache records them so they are never re-run.
OK = "ok"
COMPILE_ERROR = "compile_error"
LAUNCH_ERROR = "launch_error"
RUNTIME_ERROR = "runtime_error"
VERIFY_FAILED = "verify_failed"
TIMEOUT = "timeout"
INVALID = "invalid"
STATUSES = (OK, COMPILE_ERROR, LAUNCH_ERROR, RUNTIME_ERROR, VERIFY_FAILED, TIMEOUT, INVALID)


@dataclass
class Result:
    config_id: int
    status: str
    time_ms: float = math.nan  # median of times_ms (Kernel Tuner's "time")
    times_ms: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    # Stopped by racing (model/racing.py) before ``iterations`` timed launches: ``times_ms`` holds
    # the launches it got, and its status stays ok.
    raced: bool = False
    # What the backend observed besides time (power, energy, clocks), by the names the
    # problem declares in ``observed_names``; missing names are NaN in the file.
    observed: dict[str, float] = field(default_factory=dict)
    # Filled in on rank 0 by ``objective.Objective.evaluate`` after the gather (metric
    # functions come from the spec and never travel to other ranks).
    metrics: dict[str, float] = field(default_factory=dict)
    objective: float = math.nan  # the value of the run's objective (time, a metric or an observed value)
    score: float = math.nan  # what strategies minimise: inf for a failure, NaN until evaluated
    # One score per objective when the run has several (``score`` is the first); () until evaluated.
    scores: tuple[float, ...] = ()
    # Filled in by the scheduler, which knows where and when the backend ran.
    rank: int = -1
    batch: int = -1
    started_s: float = math.nan  # on the run's clock, see comm.RunClock
    finished_s: float = math.nan

    @property
    def ok(self) -> bool:
        return self.status == OK
