"""Rank 0's search, made from the loaded problem and settings: the space built, the priors read
on it, the strategy made (``prepare``). spec/ checks each field as it loads; what only the built
space can show wrong (a failing restriction, an empty space, a prior of another space, options
the strategy refuses) is refused here, as the spec's error. No MPI here."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from mpitune import strategies
from mpitune.errors import SpecError, UserError
from mpitune.model.prior import NothingShared, Prior, PriorSource, align
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.restrictions import RestrictionError
from mpitune.model.searchspace import SearchSpace, SpaceTooLarge
from mpitune.scheduling.manager import Setup
from mpitune.store.integrity import refuse_unusable

# What runs rank 0's ``prepare`` under a deadline (the command line's --load-timeout).
Deadline = Callable[[Callable[[], Setup]], Setup]


def prepare(problem: Problem, settings: RunSettings) -> Setup:
    """Everything that can be wrong with the user's input is found here, on rank 0."""
    try:
        # Before building the space, which may take long: a file that can never be the cache.
        refuse_unusable(
            settings.cache_path, problem.kernel.spec_path, problem.kernel.replay.path if problem.kernel.replay else ""
        )
    except UserError as exc:
        raise SpecError(problem.kernel.spec_path, "cache", str(exc)) from None
    try:
        if problem.configs is None:
            space = SearchSpace.build(problem.kernel.tune_params, problem.restrictions)
        else:
            space = SearchSpace.from_configs(problem.kernel.tune_params, problem.configs).restricted(
                problem.restrictions
            )
    except RestrictionError as exc:  # a restriction that fails on some values
        raise SpecError(problem.kernel.spec_path, "restrictions", str(exc)) from None
    except SpaceTooLarge as exc:
        raise SpecError(problem.kernel.spec_path, "tune_params", str(exc)) from None
    if len(space) == 0:
        raise SpecError(problem.kernel.spec_path, "restrictions", "no configuration satisfies the restrictions")
    prior = read_prior(problem, settings, space)
    try:
        strategy = strategies.create(settings.strategy, space, settings.seed, settings.strategy_options, prior)
    except ValueError as exc:
        raise SpecError(problem.kernel.spec_path, "strategy_options", str(exc)) from None
    return Setup(problem, settings, space, strategy, prior)


def read_prior(problem: Problem, settings: RunSettings, space: SearchSpace) -> Prior | None:
    """The priors the settings name, on this space's ids (None: none); a prior that cannot be
    one is refused in one line naming its file: damaged, this run's own file, of another kernel
    (unless ``prior_any_kernel``), or sharing no parameter or configuration with the space.
    Reading one runs no code: it is data, read as a replay reads it."""
    if not settings.prior:
        return None
    from mpitune.store.measured import file_sha256, load  # reads JSON or HDF5: only when a prior is given

    sources, times = [], []
    for path in settings.prior:
        if path == settings.cache_path:
            raise SpecError(problem.kernel.spec_path, "prior", f"{path} is this run's own results file, not a prior")
        try:
            data, digest = load(path), file_sha256(path)
        except UserError as exc:
            raise SpecError(problem.kernel.spec_path, "prior", str(exc)) from None
        if data.kernel_name != problem.kernel.kernel_name and not settings.prior_any_kernel:
            raise SpecError(
                problem.kernel.spec_path,
                "prior",
                f"{path} measured kernel {data.kernel_name!r}, not {problem.kernel.kernel_name!r} "
                "(prior_any_kernel = True, or --prior-any-kernel, takes it all the same)",
            )
        try:
            shared, time_ms = align(space, data.tune_params, data.configs, data.prior_time_ms())
        except NothingShared as exc:
            raise SpecError(problem.kernel.spec_path, "prior", f"{path}: {exc}") from None
        matched = int(np.isfinite(time_ms).sum())
        size = json.dumps(data.problem_size, default=str)
        sources.append(PriorSource(path, data.kernel_name, data.device_name, size, shared, matched, digest))
        times.append(time_ms)
    return Prior(tuple(sources), tuple(times))
