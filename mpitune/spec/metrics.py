"""``metrics``, ``objective`` and ``objective_higher_is_better``: what is optimised.

As in Kernel Tuner, ``objective`` is one name or a list of names. With a list, the search looks
for the Pareto front. ``objective_higher_is_better`` is one bool, or a list of one bool per name.
Each metric is tried on a sample ``p``: the first value of every parameter, time 1 ms, every
observed value 1. So a misspelled name fails here, not on every result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from mpitune.model.objective import TIME, TIME_NAMES, Aim, Metric, expression, first_mistake, sample
from mpitune.model.problem import Kernel, Problem, callable_text
from mpitune.model.schema import RESERVED
from mpitune.spec.checker import Checker


def attach(check: Checker, spec: Mapping[str, Any], namespace: Mapping[str, Any], problem: Problem) -> Problem:
    """``problem`` with the spec's metrics and objectives.

    ``problem`` already knows its parameters and observed values, names a metric may not take.
    ``namespace`` is the spec module's: expression metrics see its names."""
    made = _metrics(check, spec["metrics"], namespace, problem.kernel)
    names = _objective_names(check, spec["objective"], problem.kernel, made)
    directions = _directions(check, spec["objective_higher_is_better"], len(names))
    return replace(problem, aim=Aim(tuple(names), tuple(directions), tuple(made)))


def _objective_names(check: Checker, given: Any, kernel: Kernel, made: list[Metric]) -> list[str]:
    """The objective names, Kernel Tuner's names of observed values taken as ours."""
    several = isinstance(given, (list, tuple))
    if several and not given:
        check.fail("objective", "is an empty list; name one objective or several")
    names = []
    known = [TIME] + [m.name for m in made] + list(kernel.observed_names)
    for name in given if several else [given]:
        ours = kernel.observed_aliases.get(name, name) if isinstance(name, str) else name
        if ours not in known:
            check.fail(
                "objective",
                f"{name!r} is neither 'time' nor a metric nor an observed value; "
                f"choose one of {', '.join(map(repr, known))}",
            )
        if ours in names:
            check.fail("objective", f"{name!r} is named twice")
        names.append(ours)
    return names


def _directions(check: Checker, given: Any, count: int) -> list[bool]:
    """One direction per objective: a list as long as the objectives, or one bool for one.
    Not given (None), every objective is lower-is-better, Kernel Tuner's default for time."""
    if given is None:
        return [False] * count
    if count == 1 and isinstance(given, (list, tuple)) and len(given) == 1:
        given = given[0]
    if count == 1:
        if not isinstance(given, (bool, np.bool_)):
            check.fail("objective_higher_is_better", f"must be True or False, got {given!r}")
        return [bool(given)]
    if not isinstance(given, (list, tuple)) or len(given) != count:
        check.fail(
            "objective_higher_is_better",
            f"must be a list of {count} True/False, one per objective, got {given!r}",
        )
    for value in given:
        if not isinstance(value, (bool, np.bool_)):
            check.fail("objective_higher_is_better", f"must hold True or False, got {value!r}")
    return [bool(v) for v in given]


def _metrics(check: Checker, metrics: Any, namespace: Mapping[str, Any], kernel: Kernel) -> list[Metric]:
    """Each metric checked, and tried on a sample configuration."""
    made: list[Metric] = []
    metrics = metrics or {}
    if not isinstance(metrics, dict):
        check.fail("metrics", f"must be a dict of name -> function of p (or expression string), got {metrics!r}")
    taken = (
        set(kernel.tune_params)
        | set(TIME_NAMES)
        | set(kernel.observed_names)
        | set(kernel.observed_aliases)
        | set(RESERVED)
    )
    for name, definition in metrics.items():
        if not isinstance(name, str) or not name.strip():
            check.fail("metrics", f"metric name {name!r} is not a non-empty string")
        if name in taken:
            check.fail(
                "metrics", f"metric name {name!r} is taken by a parameter, time, an observed value or a result field"
            )
        taken.add(name)
        if isinstance(definition, str):
            try:
                made.append(expression(name, definition, namespace))
            except SyntaxError as exc:
                check.fail("metrics", f"{name!r}: invalid expression {definition!r}: {exc.msg}")
        elif callable(definition):
            made.append(Metric(name, definition, callable_text(definition)))
        else:
            check.fail("metrics", f"{name!r} must be a function of p or an expression string, got {definition!r}")
    first = {k: values[0] for k, values in kernel.tune_params.items()}
    mistake = first_mistake(made, sample(first, [*kernel.observed_names, *kernel.observed_aliases]))
    if mistake:
        check.fail("metrics", f"{mistake[0]!r} fails on a sample configuration {first}: {mistake[1]}")
    return made
