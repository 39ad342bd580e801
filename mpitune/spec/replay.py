"""Problems answered from measured data, not a kernel: the ``replay`` verb, and a spec with
``simulation_mode = True``. The data is a Kernel Tuner cache or an mpitune file. The verb takes
several of one kernel and space, each measured on another device model, to simulate a job of them.

Reading the data is the store's job. The caller hands over its reader, so this layer knows no
file format."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from mpitune.backends.kernel_cache_reach import LOAD_S, CacheReach, Reach, cache_reach
from mpitune.errors import UserError, not_a_file
from mpitune.model.problem import Kernel, MeasuredFile, Problem, ReplaySource, RunSettings, Schedule, plain
from mpitune.model.replay_clock import RecordedRun
from mpitune.spec import fields, metrics
from mpitune.spec.checker import Checker
from mpitune.spec.settings import Overrides, run_settings, search_fields
from mpitune.spec.settings_table import CACHE_PATH, SCHEDULE


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
    @property
    def recorded(self) -> RecordedRun: ...


ReadMeasured = Callable[[str], MeasuredSpace]

KERNEL_CACHE_REACHES = tuple(r.value for r in Reach)  # --kernel-cache's choices


def kernel_cache_assumed(recorded: RecordedRun, reach: str | None = None) -> RecordedRun:
    """``recorded`` with what the candidates timed again cost to compile, where the data does not
    record it (a Kernel Tuner cache). They are timed again by the confirmation and calibration.

    Each was compiled once in the run already. Where the kernel cache reaches every rank, it is
    loaded in ``LOAD_S``, by the rank or by its compile workers. That is ``reach`` "shared", or by
    default a folder on a file system the nodes share. Else (node, off) it is compiled again, as
    long as its recorded compile. A rank of the same node that compiled it is not counted. Data
    of an mpitune run is replayed as it recorded."""
    if recorded.complete or recorded.retime_compile_s is not None:
        return recorded
    found = cache_reach() if reach is None else CacheReach(Reach(reach), f"--kernel-cache {reach}")
    if found.reach is Reach.SHARED:
        said = f"a candidate timed again (confirmation, calibration) is loaded from the kernel cache in {LOAD_S:g} s"
        return replace(recorded, retime_compile_s=LOAD_S, assumptions=(*recorded.assumptions, f"{said}: {found.why}"))
    said = "a candidate timed again (confirmation, calibration) is compiled again on each rank"
    return replace(recorded, assumptions=(*recorded.assumptions, f"{said}: {found.why}"))


def replay_problem(
    data: MeasuredSpace,
    overrides: Overrides,
    strategy: str | None = None,
    strategy_options: Any = None,
    racing: Any = None,
    device_bias: Sequence[float] = (),
    device_bias_sd: float | None = None,
    schedule: Any = None,
    kernel_cache: str | None = None,
    more: Sequence[MeasuredSpace] = (),
) -> tuple[Problem, RunSettings]:
    """The problem and settings of a replay of ``data``.

    The results go to ``overrides``' ``cache_path``, by default the data's name with .replay.h5.
    ``device_bias``, ``device_bias_sd``: the simulated devices' bias (``ReplaySource``).
    ``racing`` None: as the data's run raced. An mpitune file that raced races as recorded; one
    that did not is not raced. A Kernel Tuner cache is raced by the default rule. ``schedule``: a
    spec's, which ``--schedule`` in ``overrides`` overrides. None: as the data's run handed out
    its work, else the default. ``kernel_cache``: how far the kernel cache reaches
    (``kernel_cache_assumed``).

    ``more``: the same kernel and space measured on other device models. World rank r then
    replays file r % k of ``data`` and ``more`` (``ReplaySource.files``). The problem is
    ``data``'s, with each file's own in ``Problem.replayed``. Files of another kernel name or
    other parameters are refused in one line."""
    check = Checker(data.source)
    factors, spread = _bias(check, device_bias, device_bias_sd)
    for other in more:
        _refuse_another_space(data, other)
    name = Path(data.source).name.split(".")[0]
    search = search_fields(
        strategy=strategy,
        strategy_options=strategy_options,
        cache=overrides[CACHE_PATH] or f"{name}.replay.h5",
        racing=_as_recorded(data.recorded) if racing is None else racing,
        schedule=schedule if schedule is not None else (data.recorded.schedule or Schedule.AUTO.value),
    )
    settings = run_settings(check, search, overrides)
    every = (data, *more)
    files = tuple(
        MeasuredFile(os.path.abspath(d.source), kernel_cache_assumed(d.recorded, kernel_cache)) for d in every
    )
    alone = tuple(
        _replayed(d, ReplaySource(f.path, factors, spread, settings.seed, f.run)) for d, f in zip(every, files)
    )
    if not more:
        return alone[0], settings
    replay = ReplaySource(files[0].path, factors, spread, settings.seed, files[0].run, files)
    return replace(alone[0], kernel=replace(alone[0].kernel, replay=replay), replayed=alone), settings


def _replayed(data: MeasuredSpace, replay: ReplaySource) -> Problem:
    """The problem of ``data`` replayed alone, from ``replay``."""
    sizes = [int(v) for v in data.problem_size if isinstance(v, numbers.Integral)][:3] or [1]
    iterations = max((len(m.times_ms) for m in data.measurements), default=1) or 1
    kernel = Kernel(
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
        observed_names=tuple(data.observed_names),
        replay=replay,
    )
    return Problem(kernel, configs=tuple(data.configs))


def _refuse_another_space(data: MeasuredSpace, other: MeasuredSpace) -> None:
    """A ``UserError`` naming both files and what differs, unless they measured one kernel and space.

    Their ranks would otherwise search spaces that share no configuration ids."""
    differs = _space_difference(data, other)
    if differs:
        raise UserError(f"{data.source} and {other.source} cannot be replayed together: {differs}")


def _space_difference(data: MeasuredSpace, other: MeasuredSpace) -> str:
    """What differs between the kernel names and parameters of two files; '' where nothing does."""
    if data.kernel_name != other.kernel_name:
        return f"they measured the kernels {data.kernel_name!r} and {other.kernel_name!r}"
    names, other_names = list(data.tune_params), list(other.tune_params)
    if set(names) != set(other_names):
        only = ", ".join(n for n in names if n not in other_names) or "none"
        other_only = ", ".join(n for n in other_names if n not in names) or "none"
        return f"their parameters differ (only the first has {only}; only the second has {other_only})"
    if names != other_names:
        return "they list the same parameters in another order"
    for n in names:
        values, other_values = [plain(v) for v in data.tune_params[n]], [plain(v) for v in other.tune_params[n]]
        if values != other_values:
            return f"parameter {n} takes {values} in the first and {other_values} in the second"
    return ""


def _as_recorded(recorded: RecordedRun) -> bool:
    """Whether to race when not told: as the recorded run did. Where nothing was recorded, yes."""
    return recorded.raced if recorded.complete else True


def _bias(check: Checker, factors: Sequence[float], sd: float | None) -> tuple[tuple[float, ...], float]:
    """The checked bias. A factor must be a positive finite number: a time scaled by 0 or inf
    means nothing. A spread must be a finite one >= 0. One way of saying it is given, not both."""
    if factors and sd is not None:
        check.fail("device_bias", "give the factors or their spread (--device-bias or --device-bias-sd), not both")
    for f in factors:
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not (math.isfinite(f) and f > 0):
            check.fail("device_bias", f"each factor must be a finite number greater than 0, got {f!r}")
    if sd is not None and (
        isinstance(sd, bool) or not isinstance(sd, numbers.Real) or not (math.isfinite(sd) and sd >= 0)
    ):
        check.fail("device_bias_sd", f"must be a finite number of at least 0, got {sd!r}")
    return tuple(float(f) for f in factors), float(sd or 0.0)


def simulation(
    check: Checker,
    spec: Mapping[str, Any],
    namespace: Mapping[str, Any],
    overrides: Overrides,
    read_measured: ReadMeasured,
) -> tuple[Problem, RunSettings]:
    """``simulation_mode = True``: as in Kernel Tuner, ``cache`` names the measured data to replay.
    The results go to ``--cache``, by default the spec's name with .replay.h5."""
    source = spec["cache"]
    if not isinstance(source, (str, Path)) or not str(source):
        check.fail(
            "cache",
            "simulation_mode needs cache = the measured data to replay "
            "(a Kernel Tuner JSON cache or an mpitune .h5 file)",
        )
    source = os.path.join(os.path.dirname(check.path), str(source))
    if not os.path.isfile(source):
        check.fail("cache", f"file {spec['cache']!r} {not_a_file(source) or 'not found'}")
    output = overrides[CACHE_PATH] or Path(check.path).stem + ".replay.h5"
    problem, settings = replay_problem(
        read_measured(source),
        overrides.replaced(cache_path=output),
        spec["strategy"],
        spec["strategy_options"],
        spec["racing"],
        schedule=SCHEDULE.checked(check, spec["schedule"]).value,  # a bad one named in the spec, not the data
    )
    restrictions = fields.restrictions(check, spec["restrictions"], list(problem.kernel.tune_params))
    problem = replace(problem, kernel=replace(problem.kernel, spec_path=check.path), restrictions=tuple(restrictions))
    return metrics.attach(check, spec, namespace, problem), settings
