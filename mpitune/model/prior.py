"""Times measured elsewhere, put on this run's configuration ids so a strategy can start from them.

Elsewhere is another GPU, another problem size, or an earlier version of the kernel.

A prior and the space it informs rarely have the same parameters or values. A parameter may be
new, dropped, or given other values. So configurations are matched on the parameters both share,
and only on the values both have. Each configuration of this space gets the best valid time among
the prior's configurations that agree with it on every shared parameter. It gets NaN when there
is none. It is the best, not the mean. A parameter the prior had and this space lacks was tuned
there too. What a shared setting promises is the best the prior reached with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.searchspace import SearchSpace


@dataclass(frozen=True)
class PriorSource:
    """Where one prior came from, as ``report`` and the run's records show it."""

    path: str
    kernel_name: str
    device_name: str
    problem_size: str
    shared: tuple[str, ...]  # the tunable parameters it shares with this space
    matched: int  # configurations of this space it gives a time
    # SHA-256 of the file's bytes: a resumed run continues its search only from the same priors.
    sha256: str = ""


@dataclass(frozen=True)
class Prior:
    """One or more priors on a space's ids.

    ``time_ms[k][i]`` is source k's time (ms, lower is better) for configuration id i of the
    current space. It is NaN where the source has none. Sources are kept apart. Their devices
    differ, so their times are on different scales."""

    sources: tuple[PriorSource, ...]
    time_ms: tuple[np.ndarray, ...]

    def digests(self) -> list[str]:
        """What a resumed run's search must have started from to be continued (its key)."""
        return [source.sha256 for source in self.sources]


class NothingShared(ValueError):
    """A prior that shares no tunable parameter, or no configuration, with the space."""


def usable(time_ms: float) -> bool:
    """A time a prior gives: finite and above 0."""
    return math.isfinite(time_ms) and time_ms > 0


def _no_usable_time(prior_time_ms: Sequence[float]) -> str:
    """Why a prior gives nothing.

    Otherwise a search told "times for 24 of 24" would start from none of them without a word."""
    at_most_zero = sum(1 for t in prior_time_ms if math.isfinite(t) and t <= 0)
    if at_most_zero:
        return f"it has no usable time: {at_most_zero} of its {len(prior_time_ms)} times are 0 or below"
    return f"it has no usable time: none of its {len(prior_time_ms)} configurations passed"


def align(
    space: SearchSpace,
    prior_params: dict[str, list[Any]],
    prior_configs: Sequence[tuple[Any, ...]],
    prior_time_ms: Sequence[float],
) -> tuple[tuple[str, ...], np.ndarray]:
    """The parameters ``space`` shares with a prior, and the prior's time for each id.

    The time is NaN for an id of the space the prior has none for. ``prior_configs`` are value
    tuples in ``prior_params`` order. ``prior_time_ms`` are their times, NaN (or inf) for a
    configuration that failed there. A time of 0 or below is no measurement: a kernel takes time.
    So it is left out as a failure is. Raise ``NothingShared`` when no parameter, or no
    configuration, is shared. Raise it too when no time is usable.
    """
    shared = tuple(name for name in space.names if name in prior_params)
    if not shared:
        raise NothingShared(
            f"it shares no tunable parameter with this space (it has {', '.join(prior_params) or 'none'}; "
            f"this space has {', '.join(space.names)})"
        )
    prior_columns = [list(prior_params).index(name) for name in shared]
    best: dict[tuple[Any, ...], float] = {}
    for config, time_ms in zip(prior_configs, prior_time_ms):
        if not usable(time_ms):
            continue
        key = tuple(config[c] for c in prior_columns)
        if time_ms < best.get(key, math.inf):
            best[key] = float(time_ms)
    if not best:
        raise NothingShared(_no_usable_time(prior_time_ms))
    # The keys as this space's value indices per shared parameter (-1: a value it does not have).
    columns = [space.names.index(name) for name in shared]
    values = [space.tune_params[name] for name in shared]
    table = {tuple(values[p].index(v) if v in values[p] else -1 for p, v in enumerate(k)): t for k, t in best.items()}
    # Few distinct shared rows (one per key at most): look each up once.
    distinct, inverse = np.unique(space.indices[:, columns].astype(np.int64), axis=0, return_inverse=True)
    found = np.array([table.get(tuple(r), math.nan) for r in distinct.tolist()], dtype=np.float64)
    aligned: np.ndarray = found[inverse.reshape(-1)]
    if not np.isfinite(aligned).any():
        raise NothingShared(f"none of its configurations agrees with one of this space's on {', '.join(shared)}")
    return shared, aligned
