"""Loading a spec file, or the same names as a dict: the only place user input is checked.

A spec is a Python file. Its module-level names are Kernel Tuner's ``tune_kernel`` arguments, so
a Kernel Tuner script ports by copying. Everything is checked here once, on rank 0, before any
rank compiles anything. Every problem becomes a ``SpecError`` naming the file and the field.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import runpy
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from mpitune.errors import SpecError, not_a_file
from mpitune.model.problem import Kernel, Problem, RunSettings
from mpitune.spec import fields, fit, metrics
from mpitune.spec.checker import Checker
from mpitune.spec.kernel_tuner import DEFAULTS, KNOWN, UNSUPPORTED
from mpitune.spec.replay import ReadMeasured, simulation
from mpitune.spec.settings import Overrides, add_prior, run_settings
from mpitune.spec.settings_table import ISOLATE

log = logging.getLogger(__name__)

MAX_TIMES_BYTES = 8_000_000  # one results row's launch times (see _iterations)
MAX_ITERATIONS = MAX_TIMES_BYTES // 8  # one float64 each: 1,000,000


def read_spec_module(path: str) -> dict[str, Any]:
    """Execute the spec file. Any failure inside it is the spec's, reported with its line.

    A spec only defines names. So what would end or outlive the process is refused while it
    loads. ``sys.exit`` and ``KeyboardInterrupt`` become the spec's error. ``os._exit``,
    ``os.abort`` and ``os.fork`` raise instead of acting. (A fork would run a second rank 0, or
    hold the launch open until its child exits.) The working directory is put back, so that an
    ``os.chdir`` in the spec cannot move the cache."""
    if not os.path.isfile(path):
        raise SpecError(path, "spec", not_a_file(path) or "no such file")

    def where(exc: BaseException) -> str:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        return f"line {frames[-1].lineno}" if frames else "while loading"

    class Escape(BaseException):
        """What a call that would leave the process raises instead, while the spec loads."""

    def refuse(call: str) -> Callable[..., NoReturn]:
        def refused(*args: Any) -> NoReturn:
            raise Escape(f"calls {call}({', '.join(map(repr, args))}) while loading; a spec only defines names")

        return refused

    cwd = os.getcwd()
    saved = {name: getattr(os, name) for name in ("_exit", "abort", "fork", "forkpty")}
    for name in saved:
        setattr(os, name, refuse(f"os.{name}"))
    try:
        return runpy.run_path(path, run_name="__mpitune_spec__")
    except SyntaxError as exc:
        raise SpecError(path, "syntax", f"line {exc.lineno}: {exc.msg}") from None
    except SystemExit as exc:
        raise SpecError(
            path, where(exc), f"calls sys.exit({exc.code!r}) while loading; a spec only defines names"
        ) from None
    except KeyboardInterrupt as exc:
        raise SpecError(path, where(exc), "interrupted while loading") from None
    except Escape as exc:
        raise SpecError(path, where(exc), str(exc)) from None
    except Exception as exc:  # the user's code failed while defining the problem
        raise SpecError(path, where(exc), " ".join(f"{type(exc).__name__}: {exc}".splitlines())) from None
    finally:
        for name, call in saved.items():
            setattr(os, name, call)
        try:
            moved = os.getcwd() != cwd
        except OSError:  # into a folder it then removed
            moved = True
        if moved:
            log.warning("%s changed the working directory while loading; mpitune went back to %s", path, cwd)
            os.chdir(cwd)


def _misspellings(names: dict[str, Any], strict: bool) -> list[tuple[str, str | None]]:
    """Names close to one mpitune knows. Any other name (a helper, a size) is the spec's own.

    ``strict``: every name must be one mpitune knows (keyword arguments, not a module's names).
    The second of each pair is the likely intended name, None when none is close."""
    found: list[tuple[str, str | None]] = []
    for name, value in names.items():
        if name in KNOWN or (not strict and (name.startswith("_") or inspect.ismodule(value))):
            continue
        close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.85 if not strict else 0.6)
        if close or strict:
            found.append((name, close[0] if close else None))
    return found


def load_spec(
    path: str, overrides: Overrides | None = None, read_measured: ReadMeasured | None = None
) -> tuple[Problem, RunSettings]:
    """Read, check and normalise a spec file. ``overrides`` come from the command line.
    ``read_measured`` reads the data a ``simulation_mode`` spec replays."""
    path = os.path.abspath(path)
    return load_names(read_spec_module(path), path, os.path.dirname(path), overrides, read_measured)


def load_names(
    names: dict[str, Any],
    origin: str,
    base_dir: str,
    overrides: Overrides | None = None,
    read_measured: ReadMeasured | None = None,
    strict: bool = False,
) -> tuple[Problem, RunSettings]:
    """The checks of ``load_spec`` on a dict of names.

    The names are a spec module's, or the keyword arguments of ``mpitune.tune_kernel``
    (``strict``: no name of its own). ``origin`` names the input in every error: the spec's path,
    or the function. ``base_dir`` is where a relative ``kernel_source`` path is looked up."""
    overrides = overrides or Overrides()
    check = Checker(origin)
    spec = _known(check, names, strict)
    if spec["simulation_mode"]:
        if read_measured is None:
            raise TypeError("load_spec of a simulation_mode spec needs read_measured")
        problem, settings = simulation(check, spec, names, overrides, read_measured)
    else:
        problem = _problem(check, spec, names, base_dir, overrides[ISOLATE])
        settings = run_settings(check, spec, overrides)
        problem = replace(problem, kernel=replace(problem.kernel, cache_path=settings.cache_path))
    return problem, add_prior(check, spec["prior"], spec["prior_any_kernel"], base_dir, settings)


def load_problem(names: dict[str, Any], origin: str, base_dir: str, strict: bool = False) -> Problem:
    """Only the problem of ``load_names``, to run one configuration (``mpitune.run_kernel``).
    Nothing is searched and no results file is written."""
    check = Checker(origin)
    return _problem(check, _known(check, names, strict), names, base_dir, isolate=False)


def _known(check: Checker, names: dict[str, Any], strict: bool) -> dict[str, Any]:
    """Every name mpitune knows, with its default where ``names`` lacks it. Misspelled and
    refused names fail."""
    unknown = "unknown keyword argument" if strict else "unknown name"
    for wrong, right in _misspellings(names, strict):
        check.fail(wrong, unknown + (f"; did you mean {right!r}?" if right else ""))
    for name in UNSUPPORTED:
        if name in names:
            check.fail(name, "is a Kernel Tuner argument that mpitune does not support yet")
    return {k: names.get(k, default) for k, default in DEFAULTS.items()}


def _problem(check: Checker, spec: dict[str, Any], names: dict[str, Any], base_dir: str, isolate: bool) -> Problem:
    caps = fit.language(spec["lang"], check.fail)
    kernel_name = fields.kernel_name(check, spec["kernel_name"])
    fit.kernel_name_fits(kernel_name, caps, check.fail)
    kernel_source = fields.kernel_source(check, spec["kernel_source"], base_dir)
    tune_params = fields.tune_params(check, spec["tune_params"])
    arguments = fields.arguments(check, spec["arguments"])
    answer = fields.answer(check, spec["answer"], arguments)
    restrictions = fields.restrictions(check, spec["restrictions"], list(tune_params))
    problem_size = fields.problem_size(check, spec["problem_size"])
    block_size_names = fields.block_size_names(check, spec["block_size_names"])
    grid_div = fields.grid_div(check, spec, tune_params)
    compiler_options = check.str_list("compiler_options", spec["compiler_options"] or [])
    fit.memory(spec, caps, check.fail)
    extras = fields.extras(check, spec, tune_params)

    kernel = Kernel(
        spec_path=check.path,
        kernel_name=kernel_name,
        kernel_source=kernel_source,
        lang=caps.lang,
        problem_size=problem_size,
        arguments=arguments,
        answer=answer,
        atol=check.number("atol", spec["atol"], zero_ok=True),
        tune_params=tune_params,
        grid_div=grid_div,
        block_size_names=tuple(block_size_names),
        iterations=_iterations(check, spec["iterations"]),
        compiler_options=tuple(compiler_options),
        timeout_s=None if spec["timeout_s"] is None else check.number("timeout_s", spec["timeout_s"]),
        isolate=isolate,
        extras=extras,
    )
    fit.problem(kernel, caps, check.fail)
    kernel = _observed(fit.observers(spec["observers"], tune_params, caps, check.fail), kernel)
    return metrics.attach(check, spec, names, Problem(kernel, tuple(restrictions)))


def _iterations(check: Checker, value: Any) -> int:
    """The timed launches per configuration, at most ``MAX_ITERATIONS``.

    Every timed launch's time is kept: 8 bytes of its configuration's row in the results file
    (model/schema.py). Until the row is written it is also a Python float, four times that. Its
    rank and rank 0 hold those floats for a whole chunk of configurations. ``MAX_TIMES_BYTES`` a
    row (10^6 launches) is the most that fits: a chunk of 32 such rows holds about 1 GB."""
    iterations = check.int_("iterations", value, 1)
    if iterations > MAX_ITERATIONS:
        check.fail(
            "iterations",
            f"must be at most {MAX_ITERATIONS:,}, got {iterations:,}: every timed launch's time is kept "
            f"(8 bytes of its configuration's row in the results file, 32 in memory), and a row may hold "
            f"{MAX_TIMES_BYTES // 10**6} MB",
        )
    return iterations


def _observed(observers: list[Any], kernel: Kernel) -> Kernel:
    """``kernel`` with the observers. What they record become its observed names, with their
    Kernel Tuner aliases."""
    if not observers:
        return kernel
    names = observers[0].value_names()
    aliases = {alias: name for name, alias in names.items()}
    return replace(kernel, observers=tuple(observers), observed_names=tuple(names), observed_aliases=aliases)
