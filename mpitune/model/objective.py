"""The run's objective and the user's metrics, evaluated on rank 0 after every gather.

A Kernel Tuner spec names ``metrics``, an ``objective`` and whether higher is better. A metric
is a function of a dict ``p`` of what is known about one configuration. ``Goal`` records what
the run optimises. The store writes and reads it; ``report`` and the HTML page show it.

Metric functions are the spec's own lambdas and closures, which cannot travel to other ranks.
So ``Objective`` scores on rank 0, on each batch once it is gathered. Scoring makes a
``Scored`` record of each result; strategies never see metrics, they minimise ``Scored.score``.

A run may name several objectives, each with its direction (Kernel Tuner's
``objective = ["time", "energy"]``). Each scored result then holds ``Scored.scores``, one per
objective; nsga2 compares them by Pareto dominance. ``Scored.score`` is the first one's. Every
single-objective strategy, the progress line and "best" follow it.

A lower-is-better objective scores its value; a higher-is-better one ``1 / value``. Not
``-value``: strategies compare scores by ratio, which needs them positive. Simulated annealing
accepts by log ratio; Bayesian optimisation fits log values. And for a rate such as GFLOP/s,
``1 / rate`` is proportional to the time of its fixed work. So the search behaves as on time.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpitune.model.result import Result, Scored

log = logging.getLogger(__name__)

TIME = "time"  # Kernel Tuner's name of the median kernel time in ms
# Names every ``p`` holds besides the parameters, observed values and metrics.
TIME_NAMES = (TIME, "time_ms", "times")
WARNINGS_PER_METRIC = 10  # then one line saying the rest are not reported
# Mistakes a metric shows on any input (a misspelled name, a wrong call): refused at load time.
# Others (a division by zero) may be particular to the sample and are left to the run.
SPEC_MISTAKES = (NameError, KeyError, TypeError, AttributeError, IndexError)


@dataclass(frozen=True)
class Metric:
    name: str
    fn: Callable[[dict[str, Any]], Any]  # of ``p``; returns a number
    text: str  # the expression or the callable's source: what the file records


def expression(name: str, text: str, namespace: Mapping[str, Any]) -> Metric:
    """A metric given as an expression string: evaluated as ``lambda p: EXPR`` written in the
    spec would be, with the names of ``p`` as variables (then the spec's own names).
    Raises SyntaxError for a malformed expression."""
    code = compile(text, f"<metric {name!r}>", "eval")
    scope = dict(namespace)
    return Metric(name, lambda p: eval(code, scope, dict(p)), text)


def sample(config: Mapping[str, Any], observed_names: Iterable[str]) -> dict[str, Any]:
    """A stand-in ``p`` for checking metrics before anything is measured."""
    return {**config, TIME: 1.0, "time_ms": 1.0, "times": [1.0], **{n: 1.0 for n in observed_names}}


def first_mistake(metrics: Iterable[Metric], p: dict[str, Any]) -> tuple[str, str] | None:
    """(metric name, what is wrong) for the first metric that fails on ``p`` the way a typo
    does, or returns something that is not a number; None if they all pass."""
    p = dict(p)
    for m in metrics:
        try:
            value = m.fn(p)
        except SPEC_MISTAKES as exc:
            return m.name, f"{type(exc).__name__}: {exc}"
        except (ArithmeticError, ValueError):
            value = math.nan  # particular to the sample values
        if not _is_number(value):
            return m.name, f"returns {type(value).__name__} {value!r}, not a number"
        p[m.name] = float(value)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real)


@dataclass(frozen=True)
class Goal:
    """What a run optimises: each objective's name and direction, and the metrics' definitions.

    The one record of the objective: the file holds it, the reader gives it back, and ``report``
    and the HTML page show it. A file written before metrics existed reads as the default: time,
    lower is better.
    """

    names: tuple[str, ...] = (TIME,)
    directions: tuple[bool, ...] = (False,)  # per objective: whether higher is better
    metrics: Mapping[str, str] = field(default_factory=dict)  # name -> its expression or source

    def __post_init__(self) -> None:
        if not self.names or len(self.directions) != len(self.names):
            raise ValueError(f"objectives {self.names} and directions {self.directions} do not pair up")

    @classmethod
    def of(cls, name: str | Sequence[str], higher_is_better: bool | Sequence[bool], metrics: Mapping[str, str]) -> Goal:
        """One objective or several, with one direction for all or one each.

        Args:
            name: an objective's name, or several names.
            higher_is_better: one bool (numpy's too) for every objective, or one per objective.
            metrics: each metric's name and definition.

        Returns:
            The goal.
        """
        names = (name,) if isinstance(name, str) else tuple(name)
        if isinstance(higher_is_better, Sequence):
            directions = tuple(bool(d) for d in higher_is_better)
        else:
            directions = (bool(higher_is_better),) * len(names)
        return cls(names, directions, dict(metrics))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Goal:
        """The goal as ``record`` writes it (the file's attribute ``objective``)."""
        several = "objectives" in record
        return cls.of(
            [str(n) for n in record["objectives"]] if several else str(record["objective"]),
            [bool(d) for d in record["objectives_higher_is_better"]] if several else bool(record["higher_is_better"]),
            {str(k): str(v) for k, v in record.get("metrics", {}).items()},
        )

    @property
    def name(self) -> str:
        """The first objective: what single-objective strategies minimise."""
        return self.names[0]

    @property
    def higher_is_better(self) -> bool:
        return self.directions[0]

    @property
    def several(self) -> bool:
        """Whether the run has several objectives (a Pareto front) rather than one best."""
        return len(self.names) > 1

    @property
    def is_kernel_time(self) -> bool:
        """Whether the run minimises the kernel time alone. Only then may slower configurations be
        raced (model/judging/racing.py); with a second objective a slow one can be on the front."""
        return self.names == (TIME,) and not self.higher_is_better

    def key(self) -> list[Any]:
        """What of the goal a saved search depends on, as it holds scores. That is the first
        objective and its direction, and all of them when there are several."""
        key: list[Any] = [self.name, self.higher_is_better]
        return key + [list(self.names), list(self.directions)] if self.several else key

    def record(self) -> dict[str, Any]:
        """As the file holds it (JSON), and the pandas tables' ``attrs["objective"]``."""
        record: dict[str, Any] = {
            "objective": self.name,
            "higher_is_better": self.higher_is_better,
            "metrics": dict(self.metrics),
        }
        if self.several:  # absent with one objective, so such files stay as they were
            record["objectives"] = list(self.names)
            record["objectives_higher_is_better"] = list(self.directions)
        return record


@dataclass(frozen=True)
class Aim:
    """What the spec asks to optimise: each objective with its direction, and the metrics.

    Rank 0's alone: the metrics are the spec's callables, which cannot travel to other ranks.
    The spec loader makes it once (spec/metrics.py); ``Objective.of`` scores for it.
    """

    names: tuple[str, ...] = (TIME,)
    directions: tuple[bool, ...] = (False,)  # per objective: whether higher is better
    metrics: tuple[Metric, ...] = ()

    @property
    def goal(self) -> Goal:
        """The record of this aim that a file keeps: the metrics by their definitions."""
        return Goal(self.names, self.directions, {m.name: m.text for m in self.metrics})


class Objective:
    """Scores every configuration for the run's ``goal``, computing the metrics on the way."""

    def __init__(
        self,
        name: str | Sequence[str] = TIME,
        higher_is_better: bool | Sequence[bool] = False,
        metrics: Iterable[Metric] = (),
        observed_names: Iterable[str] = (),
        aliases: Mapping[str, str] | None = None,
    ):
        self.metrics = list(metrics)
        self.goal = Goal.of(name, higher_is_better, {m.name: m.text for m in self.metrics})
        self.observed_names = list(observed_names)
        self.aliases = dict(aliases or {})  # Kernel Tuner's name of an observed value -> ours
        self._warned: Counter[str] = Counter()

    @classmethod
    def of(cls, aim: Aim, observed_names: Iterable[str] = (), aliases: Mapping[str, str] | None = None) -> Objective:
        """The objective that scores for ``aim``.

        Args:
            aim: what the spec asks to optimise (a problem's ``aim``).
            observed_names: the values the backend observes beside time.
            aliases: Kernel Tuner's name of an observed value, to ours.

        Returns:
            A new objective, with no warnings given yet.
        """
        return cls(aim.names, aim.directions, aim.metrics, observed_names, aliases)

    # The goal's parts, which the run's manager and the file writer read.
    @property
    def names(self) -> tuple[str, ...]:
        return self.goal.names

    @property
    def directions(self) -> tuple[bool, ...]:
        return self.goal.directions

    @property
    def several(self) -> bool:
        return self.goal.several

    @property
    def is_kernel_time(self) -> bool:
        return self.goal.is_kernel_time

    def key(self) -> list[Any]:
        return self.goal.key()

    def record(self) -> dict[str, Any]:
        return self.goal.record()

    @property
    def metric_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def evaluate(self, result: Result, config: Mapping[str, Any]) -> Scored:
        """``result`` scored, with its configuration, metrics and objective value.

        A failure gets NaN metrics and infinite scores. A metric that raises gets NaN and a warning.
        """
        goal, metrics = self.goal, {m.name: math.nan for m in self.metrics}
        if not result.ok:
            return _scored(result, config, metrics, math.nan, (math.inf,) * len(goal.names))
        p = {
            **config,
            TIME: result.time_ms,
            "time_ms": result.time_ms,
            "times": list(result.times_ms),
            **{n: result.observed.get(n, math.nan) for n in self.observed_names},
        }
        p.update({alias: p[name] for alias, name in self.aliases.items()})
        for m in self.metrics:
            p[m.name] = metrics[m.name] = self._metric(m, p, config)
        values = [float(p[name]) if name in p else math.nan for name in goal.names]
        scores = tuple(self.score(v, hib) for v, hib in zip(values, goal.directions))
        for name, hib, value, score in zip(goal.names, goal.directions, values, scores):
            if math.isinf(score) and not math.isnan(value):
                self._unrankable(name, hib, value, config)
        return _scored(result, config, metrics, values[0], scores)

    def _unrankable(self, name: str, higher_is_better: bool, value: float, config: Mapping[str, Any]) -> None:
        """Says once per run that a configuration's objective cannot be ranked.

        Such a value is infinite, or not positive where higher is better (see ``score``). The
        configuration stays recorded with its status and value, and cannot be the best. Without
        this line, a run where every configuration is like this ends with "no configuration
        passed". NaN comes from a failed metric, which was warned of already.
        """
        if self._warned[f"objective {name}"]:
            return
        self._warned[f"objective {name}"] += 1
        need = "a positive finite number" if higher_is_better else "a finite number"
        log.warning(
            "objective %r is %s for configuration %s: a %s objective must be %s to be ranked; such "
            "configurations are recorded (status ok, with the value) but cannot be the best; "
            "further ones are not reported",
            name,
            value,
            dict(config),
            "higher-is-better" if higher_is_better else "lower-is-better",
            need,
        )

    def _metric(self, m: Metric, p: dict[str, Any], config: Mapping[str, Any]) -> float:
        try:
            value = m.fn(dict(p))
            if not _is_number(value):
                raise TypeError(f"returned {type(value).__name__} {value!r}, not a number")
            return float(value)
        except Exception as exc:  # the user's code: any failure is this configuration's NaN
            self._warned[m.name] += 1
            if self._warned[m.name] <= WARNINGS_PER_METRIC:
                log.warning(
                    "metric %r failed for configuration %s: %s: %s%s",
                    m.name,
                    dict(config),
                    type(exc).__name__,
                    exc,
                    "; further failures of this metric are not reported"
                    if self._warned[m.name] == WARNINGS_PER_METRIC
                    else "",
                )
            return math.nan

    def score(self, value: float, higher_is_better: bool | None = None) -> float:
        """What strategies minimise for a value of an objective of that direction.

        The direction is the first objective's by default; the module's docstring says why.
        """
        if not math.isfinite(value):
            return math.inf
        if not (self.goal.higher_is_better if higher_is_better is None else higher_is_better):
            return value
        return 1.0 / value if value > 0 else math.inf

    def describe(self, result: Scored) -> str:
        """The objective of a result for a progress line: '1.234 ms' or 'GFLOP/s 567.8 (1.234 ms)'."""
        if self.goal.name == TIME:
            return f"{result.time_ms:.4g} ms"
        return f"{self.goal.name} {result.objective:.4g} ({result.time_ms:.4g} ms)"


def _scored(
    result: Result, config: Mapping[str, Any], metrics: dict[str, float], objective: float, scores: tuple[float, ...]
) -> Scored:
    judged: dict[str, Any] = {"config": dict(config), "metrics": metrics, "objective": objective, "scores": scores}
    if type(result) in (Result, Scored):  # once per result: without __init__ through every field
        return _as_scored(result, judged)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Result)}
    return Scored(**fields, **judged)


def _as_scored(result: Result, judged: dict[str, Any]) -> Scored:
    """``Scored(**result's fields, **judged)``, made as ``model.result.remade`` makes records; ``judged``
    holds every field ``Scored`` adds, so that a ``Scored`` result's own are replaced."""
    made = object.__new__(Scored)
    made.__dict__.update(result.__dict__)
    made.__dict__.update(judged)
    return made
