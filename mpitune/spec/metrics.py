"""``metrics``, ``objective`` and ``objective_higher_is_better``: what is optimised.

Each metric is tried on a sample ``p`` (the first value of every parameter, time 1 ms, every
observed value 1) so that a misspelled name fails here rather than on every result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mpitune.model.objective import TIME, TIME_NAMES, Metric, expression, first_mistake, sample
from mpitune.model.problem import Problem, callable_text
from mpitune.model.schema import RESERVED
from mpitune.spec.checker import Checker


def attach(check: Checker, spec: Mapping[str, Any], namespace: Mapping[str, Any], problem: Problem) -> None:
    """Into ``problem``, which already knows its parameters and observed values (names a
    metric may not take). ``namespace`` is the spec module's: expression metrics see its names."""
    _metrics(check, spec["metrics"], namespace, problem)
    problem.objective = problem.observed_aliases.get(spec["objective"], spec["objective"])
    known = [TIME] + [m.name for m in problem.metrics] + problem.observed_names
    if problem.objective not in known:
        check.fail(
            "objective",
            f"{problem.objective!r} is neither 'time' nor a metric nor an observed value; "
            f"choose one of {', '.join(map(repr, known))}",
        )
    higher_is_better = spec["objective_higher_is_better"]
    if not isinstance(higher_is_better, (bool, np.bool_)):
        check.fail("objective_higher_is_better", f"must be True or False, got {higher_is_better!r}")
    problem.objective_higher_is_better = bool(higher_is_better)


def _metrics(check: Checker, metrics: Any, namespace: Mapping[str, Any], problem: Problem) -> None:
    metrics = metrics or {}
    if not isinstance(metrics, dict):
        check.fail("metrics", f"must be a dict of name -> function of p (or expression string), got {metrics!r}")
    taken = (
        set(problem.tune_params)
        | set(TIME_NAMES)
        | set(problem.observed_names)
        | set(problem.observed_aliases)
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
                problem.metrics.append(expression(name, definition, namespace))
            except SyntaxError as exc:
                check.fail("metrics", f"{name!r}: invalid expression {definition!r}: {exc.msg}")
        elif callable(definition):
            problem.metrics.append(Metric(name, definition, callable_text(definition)))
        else:
            check.fail("metrics", f"{name!r} must be a function of p or an expression string, got {definition!r}")
    first = {k: values[0] for k, values in problem.tune_params.items()}
    mistake = first_mistake(problem.metrics, sample(first, [*problem.observed_names, *problem.observed_aliases]))
    if mistake:
        check.fail("metrics", f"{mistake[0]!r} fails on a sample configuration {first}: {mistake[1]}")
