"""Problems answered from measured data (a Kernel Tuner cache or an mpitune file) instead of
a kernel: the ``replay`` verb, and a spec with ``simulation_mode = True``.

Reading the data is the store's job; the caller hands over its reader, so that this layer
knows no file format."""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from mpitune.model.problem import Problem, RunSettings
from mpitune.spec import fields, metrics
from mpitune.spec.checker import Checker
from mpitune.spec.settings import Overrides, SearchFields, run_settings


class _Timed(Protocol):
    @property
    def times_ms(self) -> Sequence[float]: ...


class MeasuredSpace(Protocol):
    """What a replay takes from measured data: its parameters and configurations are the space."""

    @property
    def source(self) -> str: ...
    @property
    def kernel_name(self) -> str: ...
    @property
    def problem_size(self) -> Sequence[Any]: ...
    @property
    def tune_params(self) -> dict[str, list]: ...
    @property
    def configs(self) -> list[tuple]: ...
    @property
    def measurements(self) -> Sequence[_Timed]: ...
    @property
    def observed_names(self) -> list[str]: ...


ReadMeasured = Callable[[str], MeasuredSpace]


def replay_problem(
    data: MeasuredSpace,
    overrides: Overrides,
    strategy: str | None = None,
    strategy_options: Any = None,
    racing: Any = True,
) -> tuple[Problem, RunSettings]:
    """The results go to ``overrides.cache_path``, by default the data's name with .replay.h5."""
    check = Checker(data.source)
    sizes = [int(v) for v in data.problem_size if isinstance(v, numbers.Integral)][:3] or [1]
    iterations = max((len(m.times_ms) for m in data.measurements), default=1) or 1
    problem = Problem(
        spec_path=os.path.abspath(data.source),
        kernel_name=data.kernel_name or "replay",
        kernel_source="",
        lang="replay",
        problem_size=tuple(sizes),
        arguments=[],
        answer=None,
        atol=1e-6,
        tune_params=data.tune_params,
        iterations=iterations,
        observed_names=data.observed_names,
        replay_source=os.path.abspath(data.source),
        configs=data.configs,
    )
    name = Path(data.source).name.split(".")[0]
    search = SearchFields(
        strategy=strategy,
        strategy_options=strategy_options,
        cache=overrides.cache_path or f"{name}.replay.h5",
        racing=racing,
    )
    return problem, run_settings(check, search, overrides)


def simulation(
    check: Checker,
    spec: Mapping[str, Any],
    namespace: Mapping[str, Any],
    overrides: Overrides,
    read_measured: ReadMeasured,
) -> tuple[Problem, RunSettings]:
    """``simulation_mode = True``: as in Kernel Tuner, ``cache`` names the measured data to
    replay; the results go to ``--cache`` (default: the spec's name with .replay.h5)."""
    source = spec["cache"]
    if not isinstance(source, (str, Path)) or not str(source):
        check.fail(
            "cache",
            "simulation_mode needs cache = the measured data to replay "
            "(a Kernel Tuner JSON cache or an mpitune .h5 file)",
        )
    source = os.path.join(os.path.dirname(check.path), str(source))
    if not os.path.isfile(source):
        check.fail("cache", f"file {spec['cache']!r} not found")
    output = overrides.cache_path or Path(check.path).stem + ".replay.h5"
    problem, settings = replay_problem(
        read_measured(source),
        replace(overrides, cache_path=output),
        spec["strategy"],
        spec["strategy_options"],
        spec["racing"],
    )
    problem.spec_path = check.path
    problem.restrictions = fields.restrictions(check, spec["restrictions"], list(problem.tune_params))
    metrics.attach(check, spec, namespace, problem)
    return problem, settings
