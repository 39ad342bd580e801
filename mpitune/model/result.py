"""The record of one measured configuration, shared by backends, strategies and the cache.

A ``Result`` is what a rank measured. A ``Scored`` is that result as rank 0 judged it, with the
run's objective and metrics. Both are frozen. Each room that adds to a result makes a new record:
the scheduler its place and times, the objective its scores. So a record read anywhere is the one
its maker made. Nothing changes it behind a caller's back.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar


class Status(str, enum.Enum):
    """How a configuration ended.

    Failures are results, not exceptions. Strategies penalise them. The file records them, so
    they are never re-run. The values are what files and JSON hold. A member compares equal to
    its value and formats as it."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    RUNTIME_ERROR = "runtime_error"
    VERIFY_FAILED = "verify_failed"
    TIMEOUT = "timeout"
    INVALID = "invalid"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


@dataclass(frozen=True)
class Result:
    """One configuration as a rank measured it."""

    config_id: int
    status: Status
    time_ms: float = math.nan  # median of times_ms (Kernel Tuner's "time")
    times_ms: tuple[float, ...] = ()
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    # Stopped by racing (model/judging/racing.py) before ``iterations`` timed launches: ``times_ms`` holds
    # the launches it got, and its status stays ok.
    raced: bool = False
    # Why the GPU held its clocks down while this configuration was first timed (power, thermal,
    # slowdown; observers/throttle.py), so that it was timed again once; "again: ..." when the
    # second timing was throttled too. Empty when it was not.
    throttled: str = ""
    # What the backend observed besides time (power, energy, clocks), by the names the
    # problem declares in ``observed_names``; missing names are NaN in the file.
    observed: Mapping[str, float] = field(default_factory=dict)
    # Where and when it ran, stamped by the scheduler, which knows (scheduling/rank.py); -1 and
    # NaN from a backend, and for rows read back from a file.
    rank: int = -1
    batch: int = -1
    started_s: float = math.nan  # on the run's clock (model/timeline.py)
    finished_s: float = math.nan
    # How long the first launch took, the verified one (also the warm-up, not in ``times_ms``):
    # what racing learns how cold a first launch runs from (model/judging/racing.py). NaN where it was
    # not timed, and for rows read back from a file, which does not keep it; a configuration
    # the race stopped on it has it as its one time instead.
    first_ms: float = math.nan

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass(frozen=True)
class Scored(Result):
    """A result judged on rank 0 by the run's objective (model/objective.py).

    It is what strategies are told and the file records. The metrics come from the spec's
    functions, which never leave rank 0. ``scores`` holds one score per objective, each to
    minimise, ``inf`` for a failure."""

    config: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    objective: float = math.nan  # the value of the run's first objective (time, a metric or an observed value)
    scores: tuple[float, ...] = (math.inf,)

    @property
    def score(self) -> float:
        """What single-objective strategies minimise: the first objective's score."""
        return self.scores[0]


R = TypeVar("R", bound=Result)
_FIELDS = {cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in (Result, Scored)}


def remade(record: R, **changes: Any) -> R:
    """``dataclasses.replace(record, **changes)``, the same record, made faster.

    It is faster for a ``Result`` or ``Scored``, as neither has an ``__init__`` or
    ``__post_init__`` of its own. Rank 0 remakes results per report. It rescores every leader
    per calibration. There ``replace``'s call of ``__init__`` through all fields was most of its
    cost per configuration (docs/performance.md). Any other class, or a name that is no field,
    goes through ``replace``, which says what is wrong."""
    fields = _FIELDS.get(type(record))
    if fields is None or not fields.issuperset(changes):
        return dataclasses.replace(record, **changes)
    made = object.__new__(type(record))
    made.__dict__.update(record.__dict__)
    made.__dict__.update(changes)
    return made


def in_ask_order(results: Iterable[R], asked: Iterable[int]) -> list[R]:
    """``results`` in the order their ids were ``asked``.

    One not asked comes last, in the order given. A batch told so is told alike however it was
    dealt to the ranks."""
    place = {config_id: k for k, config_id in enumerate(asked)}
    return sorted(results, key=lambda r: place.get(r.config_id, len(place)))
