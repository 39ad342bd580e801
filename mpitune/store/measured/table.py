"""Measured results from earlier tuning, as one table, whichever file they came from.

A replay answers from it, an import writes it to a file, and a prior starts a search from it
(model/prior.py). Times of kernels are in ms, other durations in s, as everywhere in mpitune.

Numbers besides a configuration's time become its observed values: a Kernel Tuner entry's
metrics (GFLOP/s) and observers' power or energy, an mpitune file's observed values and metrics.
So a replay can optimise them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mpitune.model.replay_clock import RecordedRun
from mpitune.model.result import Status


@dataclass
class Measurement:
    """One configuration as it was measured."""

    status: Status
    time_ms: float = math.nan
    times_ms: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    observed: dict[str, float] = field(default_factory=dict)
    # As the run raced it: the timed launches it got (``times_ms`` holds them), whether racing
    # stopped it, and whether its first launch survived a chunk's first pass, so that it was
    # measured twice (scheduling/rank.py); a Kernel Tuner cache's entries got every launch.
    launches: int = 0
    raced: bool = False
    twice: bool = False


@dataclass(frozen=True)
class Searched:
    """An mpitune file's valid configurations and how its last run ended (``runs.status``).

    A status of ``running`` means killed. So a plan from a run stopped short can say it holds
    part of it.
    """

    space_size: int
    status: str


@dataclass
class MeasuredData:
    """The configurations of one file, each with its measurement, and what the file says besides."""

    source: str
    kernel_name: str
    device_name: str
    problem_size: list[Any]
    tune_params: dict[str, list[Any]]
    configs: list[tuple[Any, ...]]  # parameter values, in tune_params order
    measurements: list[Measurement]
    observed_names: list[str] = field(default_factory=list)
    recorded: RecordedRun = field(default_factory=RecordedRun)  # what the replay's clock charges besides
    # The launches the run made of configurations timed again, by (rank, purpose, config), in
    # the order they were made: calibration's references, confirmation's candidates.
    retimed: dict[tuple[int, str, tuple[Any, ...]], list[float]] = field(default_factory=dict)
    searched: Searched | None = None  # None: a Kernel Tuner cache, which records neither

    def lookup(self) -> dict[tuple[Any, ...], Measurement]:
        return dict(zip(self.configs, self.measurements))

    def prior_time_ms(self) -> list[float]:
        """Each configuration's time as a prior takes it: NaN where it did not pass."""
        return [m.time_ms if m.status == Status.OK else math.nan for m in self.measurements]
