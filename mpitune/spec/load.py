"""Loading and validating a spec file: the only place user input is checked.

A spec is a Python file whose module-level names follow Kernel Tuner's ``tune_kernel``
arguments, so a Kernel Tuner script ports by copying. Everything is checked here, once,
on rank 0, before any rank compiles anything; every problem becomes a ``SpecError``
naming the file and the field.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import os
import runpy
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mpitune.errors import SpecError
from mpitune.model.kernel_extras import KernelExtras
from mpitune.model.kernel_extras import parse as parse_extras
from mpitune.model.objective import TIME, TIME_NAMES, Metric, expression, first_mistake, sample
from mpitune.model.problem import Problem, RunSettings, _callable_text, _plain
from mpitune.model.restrictions import Restriction, RestrictionError
from mpitune.spec import fit
from mpitune.store.superblock import is_hdf5

BUDGET_OPTIONS = ("max_fevals", "time_limit", "seed")
# Kernel Tuner arguments that mpitune does not implement: refused loudly rather than ignored.
UNSUPPORTED = ("texmem_args", "verify", "device", "platform", "compiler", "parallel", "objectives")
# Kernel Tuner arguments that are accepted and have no effect here.
IGNORED = ("verbose", "quiet", "log")
# Names of result fields; a tunable parameter may not shadow them in the results table.
RESERVED = ("config_id", "status", "time_ms", "times_ms", "compile_s", "verify_s", "benchmark_s",
            "error", "rank", "batch", "run", "host", "device", "started_s", "finished_s")
DEFAULTS: dict[str, Any] = {
    "kernel_name": None, "kernel_source": None, "problem_size": None, "arguments": None,
    "tune_params": None, "restrictions": None, "grid_div_x": None, "grid_div_y": None,
    "grid_div_z": None, "block_size_names": None, "answer": None, "atol": 1e-6,
    "iterations": 7, "objective": "time", "compiler_options": None, "lang": "cupy",
    "strategy": None, "strategy_options": None, "cache": None, "simulation_mode": False,
    "timeout_s": None, "compile_workers": None, "metrics": None, "objective_higher_is_better": False,
    "defines": None, "smem_args": None, "cmem_args": None, "observers": None, "seed": None,
}
KNOWN = tuple(DEFAULTS) + UNSUPPORTED + IGNORED


class _Checker:
    """Raises SpecError for one spec file; keeps the file name in one place."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, name: str, message: str) -> None:
        # One line on stderr, whatever the message quotes (a multi-line exception text).
        raise SpecError(self.path, name, " ".join(message.splitlines()))

    def int_(self, name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            self.fail(name, f"must be an integer, got {type(value).__name__} {value!r}")
        if value < minimum:
            self.fail(name, f"must be at least {minimum}, got {value}")
        return int(value)

    def number(self, name: str, value: Any, zero_ok: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            self.fail(name, f"must be a number, got {type(value).__name__} {value!r}")
        if not (value >= 0 if zero_ok else value > 0):
            self.fail(name, f"must be {'at least' if zero_ok else 'greater than'} 0, got {value}")
        return float(value)

    def str_list(self, name: str, value: Any) -> list[str]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or \
                not all(isinstance(v, str) for v in value):
            self.fail(name, f"must be a list of strings, got {value!r}")
        return list(value)


def read_spec_module(path: str) -> dict[str, Any]:
    """Execute the spec file; any failure inside it is the spec's, reported with its line."""
    if not os.path.isfile(path):
        raise SpecError(path, "spec", "no such file")
    try:
        return runpy.run_path(path, run_name="__mpitune_spec__")
    except SyntaxError as exc:
        raise SpecError(path, "syntax", f"line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # the user's code failed while defining the problem
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        where = f"line {frames[-1].lineno}" if frames else "while loading"
        raise SpecError(path, where, " ".join(f"{type(exc).__name__}: {exc}".splitlines())) from None


def _misspellings(names: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for name, value in names.items():
        if name.startswith("_") or name in KNOWN or inspect.ismodule(value):
            continue
        close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.85)
        if close:
            found.append((name, close[0]))
    return found


def load_spec(path: str, overrides: dict[str, Any] | None = None) -> tuple[Problem, RunSettings]:
    """Read, check and normalise a spec file; ``overrides`` come from the command line."""
    path = os.path.abspath(path)
    names = read_spec_module(path)
    check = _Checker(path)
    for wrong, right in _misspellings(names):
        check.fail(wrong, f"unknown name; did you mean {right!r}?")
    for name in UNSUPPORTED:
        if name in names:
            check.fail(name, "is a Kernel Tuner argument that mpitune does not support yet")
    spec = {k: names.get(k, default) for k, default in DEFAULTS.items()}
    if spec["simulation_mode"]:
        return _simulation(check, spec, overrides or {}, names)

    caps = fit.language(spec["lang"], check.fail)
    lang = caps.lang

    kernel_name = spec["kernel_name"]
    if not isinstance(kernel_name, str) or not kernel_name.strip():
        check.fail("kernel_name", "is required and must be a non-empty string")
    fit.kernel_name(kernel_name, caps, check.fail)

    kernel_source = _kernel_source(check, spec["kernel_source"], os.path.dirname(path))
    tune_params = _tune_params(check, spec["tune_params"])
    arguments = _arguments(check, spec["arguments"])
    answer = _answer(check, spec["answer"], arguments)
    restrictions = _restrictions(check, spec["restrictions"], list(tune_params))

    problem_size = spec["problem_size"]
    if problem_size is None:
        problem_size = (1,)
    if isinstance(problem_size, numbers.Integral) and not isinstance(problem_size, bool):
        problem_size = (problem_size,)
    if not isinstance(problem_size, (list, tuple)) or not 1 <= len(problem_size) <= 3:
        check.fail("problem_size", f"must be an integer or a list of 1 to 3 integers, got {problem_size!r}")
    problem_size = tuple(check.int_("problem_size", int(v) if isinstance(v, np.integer) else v, 1)
                         for v in problem_size)

    block_size_names = spec["block_size_names"]
    if block_size_names is None:
        block_size_names = ["block_size_x", "block_size_y", "block_size_z"]
    block_size_names = check.str_list("block_size_names", block_size_names)
    if not 1 <= len(block_size_names) <= 3:
        check.fail("block_size_names", "must name 1 to 3 parameters")

    grid_div = {}
    for axis in "xyz":
        value = spec[f"grid_div_{axis}"]
        if value is not None and not isinstance(value, str):
            value = check.str_list(f"grid_div_{axis}", value)
            for name in value:
                if name not in tune_params:
                    check.fail(f"grid_div_{axis}", f"{name!r} is not a tunable parameter")
        grid_div[axis] = value

    compiler_options = spec["compiler_options"] or []
    compiler_options = check.str_list("compiler_options", compiler_options)
    fit.memory(spec, caps, check.fail)
    extras = _extras(check, spec, tune_params)

    problem = Problem(
        spec_path=path, kernel_name=kernel_name, kernel_source=kernel_source, lang=lang,
        problem_size=problem_size, arguments=arguments, answer=answer,
        atol=check.number("atol", spec["atol"], zero_ok=True), tune_params=tune_params,
        restrictions=restrictions, grid_div=grid_div, block_size_names=block_size_names,
        iterations=check.int_("iterations", spec["iterations"], 1),
        compiler_options=compiler_options,
        timeout_s=None if spec["timeout_s"] is None else check.number("timeout_s", spec["timeout_s"]),
        isolate=not (overrides or {}).get("no_isolation"), extras=extras,
    )
    fit.problem(problem, caps, check.fail)
    _observers(fit.observers(spec["observers"], tune_params, caps, check.fail), problem)
    _objective(check, spec, names, problem)
    settings = _settings(check, spec, overrides or {})
    problem.cache_path = settings.cache_path
    return problem, settings


def _observers(observers: list, problem: Problem) -> None:
    """What the observers record becomes the problem's observed names (and their Kernel Tuner aliases)."""
    if not observers:
        return
    names = observers[0].value_names()
    problem.observers = observers
    problem.observed_names = list(names)
    problem.observed_aliases = {alias: name for name, alias in names.items()}


def _extras(check: _Checker, spec: dict, tune_params: dict[str, list]) -> KernelExtras | None:
    sample = {name: values[0] for name, values in tune_params.items()}
    return parse_extras(spec["defines"], spec["smem_args"], spec["cmem_args"], sample, check.fail)


def _kernel_source(check: _Checker, source: Any, spec_dir: str) -> str:
    if isinstance(source, Path):
        source = str(source)
    if not isinstance(source, str) or not source.strip():
        check.fail("kernel_source", "is required: the kernel's source text or the path of a file holding it")
    if "\n" in source or "(" in source:
        return source
    file = os.path.join(spec_dir, source)
    if not os.path.isfile(file):
        check.fail("kernel_source", f"file {source!r} not found (looked in {spec_dir})")
    with open(file, encoding="utf-8") as fh:
        return fh.read()


def _tune_params(check: _Checker, tune_params: Any) -> dict[str, list]:
    if not isinstance(tune_params, dict) or not tune_params:
        check.fail("tune_params", "is required: a dict of parameter name -> list of values")
    result = {}
    for name, values in tune_params.items():
        if not isinstance(name, str) or not name.isidentifier():
            check.fail("tune_params", f"parameter name {name!r} is not an identifier")
        if name in RESERVED:
            check.fail("tune_params", f"parameter name {name!r} is reserved for a result field")
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range, np.ndarray)):
            check.fail("tune_params", f"{name!r} must be a list of values, got {type(values).__name__}")
        values = [_plain(v) for v in values]
        if not values:
            check.fail("tune_params", f"{name!r} has an empty list of values")
        for v in values:
            if not isinstance(v, (int, float, str)) or (isinstance(v, float) and not np.isfinite(v)):
                check.fail("tune_params", f"{name!r} has value {v!r}; values must be finite numbers or strings")
        kinds = {str if isinstance(v, str) else float if isinstance(v, float) else int for v in values}
        if str in kinds and len(kinds) > 1:
            check.fail("tune_params", f"{name!r} mixes strings and numbers")
        if len(set(values)) != len(values):
            dup = next(v for v in values if values.count(v) > 1)
            check.fail("tune_params", f"{name!r} lists the value {dup!r} more than once")
        result[name] = values
    return result


def _arguments(check: _Checker, arguments: Any) -> list:
    if not isinstance(arguments, (list, tuple)) or not arguments:
        check.fail("arguments", "is required: a list of numpy arrays and numpy scalars")
    for i, arg in enumerate(arguments):
        if isinstance(arg, np.ndarray):
            if arg.dtype.hasobject or arg.dtype.kind not in "biufc":
                check.fail("arguments", f"argument {i} has dtype {arg.dtype}; use a numeric dtype")
        elif not isinstance(arg, np.generic) or arg.dtype.kind not in "biufc":
            check.fail("arguments", f"argument {i} is a {type(arg).__name__}; use a numpy array or a numpy "
                                    f"scalar such as np.int32({arg!r}) so its C type is unambiguous")
    return [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in arguments]


def _answer(check: _Checker, answer: Any, arguments: list) -> list | None:
    if answer is None:
        return None
    if not isinstance(answer, (list, tuple)):
        check.fail("answer", "must be a list like arguments, with None where nothing is checked")
    if len(answer) != len(arguments):
        check.fail("answer", f"has {len(answer)} entries but arguments has {len(arguments)}")
    for i, (expected, arg) in enumerate(zip(answer, arguments)):
        if expected is None:
            continue
        if not isinstance(arg, np.ndarray):
            check.fail("answer", f"entry {i} checks a scalar argument; only arrays can be outputs")
        expected = np.asarray(expected)
        if expected.shape != arg.shape:
            check.fail("answer", f"entry {i} has shape {expected.shape} but argument {i} has {arg.shape}")
        # Outputs are checked by subtraction: real numbers (integers, floats) compare with
        # each other and complex with complex; booleans, strings and objects do not compare.
        kinds = {expected.dtype.kind, arg.dtype.kind}
        if not (kinds <= set("iuf") or kinds == {"c"}):
            check.fail("answer", f"entry {i} has dtype {expected.dtype} but argument {i} has {arg.dtype}; "
                                 "both must be real numbers (integer or float) or both complex")
    if all(a is None for a in answer):
        return None
    return [None if a is None else np.ascontiguousarray(a) for a in answer]


def _restrictions(check: _Checker, restrictions: Any, names: list[str]) -> list:
    if restrictions is None:
        return []
    if isinstance(restrictions, str) or callable(restrictions):
        restrictions = [restrictions]
    if not isinstance(restrictions, (list, tuple)):
        check.fail("restrictions", "must be a string, a callable, or a list of them")
    parsed = []
    for r in restrictions:
        if isinstance(r, str):
            try:
                parsed.append(Restriction(r, names))
            except RestrictionError as exc:
                check.fail("restrictions", str(exc))
        elif callable(r):
            parsed.append(_guarded(check, r))
        else:
            check.fail("restrictions", f"{r!r} is neither a string nor a callable")
    return parsed


def _guarded(check: _Checker, fn: Callable) -> Callable:
    """A callable restriction whose failure (a misspelled parameter, a bug) is the spec's.
    ``functools.wraps`` keeps its source text, which is part of the problem's identity."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", "a callable") + (f" (line {code.co_firstlineno})" if code else "")

    @functools.wraps(fn)
    def restriction(config: dict) -> bool:
        try:
            return bool(fn(config))
        except Exception as exc:
            check.fail("restrictions", f"{name} failed on {config}: {type(exc).__name__}: {exc}")
    return restriction


def _cache_path(check: _Checker, cache: Any) -> str:
    """The results file must be one mpitune can create or open: found here, not after start-up."""
    path = os.path.abspath(cache)
    if os.path.isdir(path):
        check.fail("cache", f"{path} is a directory; name a file such as {os.path.join(path, 'results.h5')}")
    if not os.path.isdir(os.path.dirname(path)):
        check.fail("cache", f"cannot write {path}: directory {os.path.dirname(path)} does not exist")
    if os.path.exists(path) and not is_hdf5(path):
        check.fail("cache", f"{path} exists and is not an HDF5 file; pass --cache NEW.h5 or remove it")
    if not os.access(path if os.path.exists(path) else os.path.dirname(path), os.W_OK):
        check.fail("cache", f"cannot write {path}: permission denied")
    return path


def _default_strategy(budget: dict) -> str:
    """With a budget, the strategy that did best on the replayed real search spaces
    (docs/strategies.md); without one every strategy measures the whole space, and brute
    force does so in order, at the least cost."""
    has_budget = budget.get("max_fevals") is not None or budget.get("time_limit") is not None
    return "genetic_algorithm" if has_budget else "brute_force"


def _settings(check: _Checker, spec: dict, overrides: dict) -> RunSettings:
    from mpitune.strategies import available  # strategies are plug-ins; only their names matter here

    options = spec["strategy_options"] or {}
    if not isinstance(options, dict):
        check.fail("strategy_options", "must be a dict")
    options = dict(options)
    budget = {k: options.pop(k) for k in BUDGET_OPTIONS if k in options}
    if spec.get("seed") is not None:  # Kernel Tuner's tune_kernel(seed=...)
        budget.setdefault("seed", spec["seed"])
    for key in ("max_fevals", "time_limit", "seed"):
        if overrides.get(key) is not None:
            budget[key] = overrides[key]
    strategy = overrides.get("strategy") or spec["strategy"] or _default_strategy(budget)
    if not isinstance(strategy, str) or strategy not in available():
        check.fail("strategy", f"unknown strategy {strategy!r}; available: {', '.join(available())}")
    settings = RunSettings(strategy=strategy, strategy_options=options)
    if budget.get("max_fevals") is not None:
        settings.max_fevals = check.int_("max_fevals", budget["max_fevals"], 1)
    if budget.get("time_limit") is not None:
        settings.time_limit_s = check.number("time_limit", budget["time_limit"])
    if budget.get("seed") is not None:
        settings.seed = check.int_("seed", budget["seed"], 0)
    settings.stop_file = overrides.get("stop_file") or ""
    settings.allow_mixed_devices = bool(overrides.get("allow_mixed_devices"))
    if overrides.get("batch_size") is not None:
        settings.batch_size = check.int_("batch_size", overrides["batch_size"], 1)
    workers = overrides.get("compile_workers")
    workers = spec.get("compile_workers") if workers is None else workers
    if workers is not None:
        settings.compile_workers = check.int_("compile_workers", workers, 0)
    cache = overrides.get("cache") or spec["cache"]
    if cache is not None and not isinstance(cache, (str, Path)):
        check.fail("cache", f"must be a file path, got {cache!r}")
    settings.cache_path = _cache_path(check, cache or Path(check.path).stem + ".h5")
    return settings


def _simulation(check: _Checker, spec: dict, overrides: dict, namespace: dict) -> tuple[Problem, RunSettings]:
    """``simulation_mode = True``: as in Kernel Tuner, ``cache`` names the measured data to
    replay; the results go to ``--cache`` (default: the spec's name with .replay.h5)."""
    source = spec["cache"]
    if not isinstance(source, (str, Path)) or not str(source):
        check.fail("cache", "simulation_mode needs cache = the measured data to replay "
                            "(a Kernel Tuner JSON cache or an mpitune .h5 file)")
    source = os.path.join(os.path.dirname(check.path), str(source))
    if not os.path.isfile(source):
        check.fail("cache", f"file {spec['cache']!r} not found")
    output = overrides.get("cache") or Path(check.path).stem + ".replay.h5"
    problem, settings = replay_problem(source, {**overrides, "cache": output},
                                       spec["strategy"], spec["strategy_options"])
    problem.spec_path = check.path
    problem.restrictions = _restrictions(check, spec["restrictions"], list(problem.tune_params))
    _objective(check, spec, namespace, problem)
    return problem, settings


def replay_problem(source: str, overrides: dict, strategy: str | None = None,
                   strategy_options: dict | None = None) -> tuple[Problem, RunSettings]:
    """A problem answered from measured data: its parameters and configurations are the space."""
    from mpitune.store import measured

    data = measured.load(source)
    check = _Checker(source)
    sizes = [int(v) for v in data.problem_size if isinstance(v, numbers.Integral)][:3] or [1]
    iterations = max((len(m.times_ms) for m in data.measurements), default=1) or 1
    problem = Problem(spec_path=os.path.abspath(source), kernel_name=data.kernel_name or "replay",
                      kernel_source="", lang="replay", problem_size=tuple(sizes), arguments=[], answer=None,
                      atol=1e-6, tune_params=data.tune_params, iterations=iterations,
                      observed_names=data.observed_names,
                      replay_source=os.path.abspath(source), configs=data.configs)
    name = Path(source).name.split(".")[0]
    spec = {"strategy": strategy, "strategy_options": strategy_options,
            "cache": overrides.get("cache") or f"{name}.replay.h5"}
    return problem, _settings(check, spec, overrides)


def _objective(check: _Checker, spec: dict, namespace: dict, problem: Problem) -> None:
    """``metrics``, ``objective`` and ``objective_higher_is_better`` into ``problem``, each
    metric tried on a sample ``p`` (the first value of every parameter, time 1 ms, every
    observed value 1) so that a misspelled name fails here rather than on every result."""
    metrics = spec["metrics"] or {}
    if not isinstance(metrics, dict):
        check.fail("metrics", f"must be a dict of name -> function of p (or expression string), got {metrics!r}")
    taken = (set(problem.tune_params) | set(TIME_NAMES) | set(problem.observed_names)
             | set(problem.observed_aliases) | set(RESERVED))
    for name, definition in metrics.items():
        if not isinstance(name, str) or not name.strip():
            check.fail("metrics", f"metric name {name!r} is not a non-empty string")
        if name in taken:
            check.fail("metrics", f"metric name {name!r} is taken by a parameter, time, an observed value "
                                  "or a result field")
        taken.add(name)
        if isinstance(definition, str):
            try:
                problem.metrics.append(expression(name, definition, namespace))
            except SyntaxError as exc:
                check.fail("metrics", f"{name!r}: invalid expression {definition!r}: {exc.msg}")
        elif callable(definition):
            problem.metrics.append(Metric(name, definition, _callable_text(definition)))
        else:
            check.fail("metrics", f"{name!r} must be a function of p or an expression string, got {definition!r}")
    first = {k: values[0] for k, values in problem.tune_params.items()}
    mistake = first_mistake(problem.metrics, sample(first, [*problem.observed_names, *problem.observed_aliases]))
    if mistake:
        check.fail("metrics", f"{mistake[0]!r} fails on a sample configuration {first}: {mistake[1]}")
    problem.objective = problem.observed_aliases.get(spec["objective"], spec["objective"])
    known = [TIME] + [m.name for m in problem.metrics] + problem.observed_names
    if problem.objective not in known:
        check.fail("objective", f"{problem.objective!r} is neither 'time' nor a metric nor an observed value; "
                                f"choose one of {', '.join(map(repr, known))}")
    problem.objective_higher_is_better = spec["objective_higher_is_better"]
    if not isinstance(problem.objective_higher_is_better, (bool, np.bool_)):
        check.fail("objective_higher_is_better", f"must be True or False, got {problem.objective_higher_is_better!r}")
    problem.objective_higher_is_better = bool(problem.objective_higher_is_better)
