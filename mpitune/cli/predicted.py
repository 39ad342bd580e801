"""A spec's whole search space at measured or predicted costs, for ``python -m mpitune plan SPEC``.

A pilot or a prior file measured some of the space's configurations; the rest never ran. A pilot
is a few batches of the spec on this machine. A prior file is the same kernel measured elsewhere.
The replay's simulated clock needs every configuration's compile, verify and benchmark seconds.
The strategy needs a kernel time to search on. Then the replay covers the spec's whole space and
budget, not only what was measured. A configuration measured keeps what was measured. Every other
one gets what the models predict from the measured ones, and is assumed to pass. There is a model
of each phase, and one of the kernel times (``costs.CostModel``). Each takes log seconds as
additive in the parameter values and pairs of them.

How far to trust the fill-in is measured, not assumed. The models are fitted again without each
quarter of the measured configurations. Then the summed cost of that quarter is predicted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.errors import UserError
from mpitune.model.result import Status
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.costs import CostModel
from mpitune.store.files import written_whole
from mpitune.store.measured import MeasuredData, Measurement

PHASES = ("compile_s", "verify_s", "benchmark_s")
FOLDS = 4  # the cross-validation's: each quarter of the measured predicted from the rest
MIN_CHECKED = 8  # passing configurations measured, at least, for the cross-validation to say anything
MAX_CHECKED = 2000  # a prior's passing configurations cross-validated, at most (a sample of them)
TIME_FLOOR_MS = 1e-9  # kernel times are logged: a time of 0 ms would be -inf
# Kernel Tuner's marker for each failure in its cache, which is how the filled space is written.
_MARKERS = {Status.INVALID: "InvalidConfig", Status.COMPILE_ERROR: "CompilationFailedConfig"}


@dataclass(frozen=True)
class Filled:
    """The space filled in: ``data`` holds every configuration, ``measured`` of them as measured.

    ``error``: the largest relative error of the summed cost of held-out configurations in the
    cross-validation. None where too few passed to tell."""

    data: MeasuredData
    measured: int
    error: float | None


def fill_in(space: SearchSpace, data: MeasuredData, iterations: int, path: str) -> Filled:
    """``data``'s measurements put on ``space``'s configurations, and the rest predicted.

    They are matched on ``space``'s parameters, which ``data`` must all have. One it has besides is
    ignored. The whole is written to ``path`` as a Kernel Tuner cache: the measured data a replay
    reads."""
    pairs = _matched(space, data)
    passed = [(i, m) for i, m in pairs if m.status == Status.OK and math.isfinite(m.time_ms)]
    if not passed:
        raise UserError(f"{data.source}: none of the spec's configurations in it passed: no cost to predict from")
    ids = list(range(len(space)))
    predicted = {name: _predicted(space, pairs if name == "compile_s" else passed, name, ids) for name in PHASES}
    time_ms = _predicted(space, passed, "time_ms", ids)
    kept = dict(reversed(pairs))  # a prior's configurations that agree on every parameter: the first
    measurements = [
        kept.get(i)
        or Measurement(
            Status.OK,
            time_ms=float(time_ms[i]),
            times_ms=[float(time_ms[i])] * iterations,
            compile_s=float(predicted["compile_s"][i]),
            verify_s=float(predicted["verify_s"][i]),
            benchmark_s=float(predicted["benchmark_s"][i]),
            launches=iterations,
        )
        for i in ids
    ]
    values = [space.tune_params[name] for name in space.names]
    configs = [tuple(v[k] for v, k in zip(values, row)) for row in space.indices.tolist()]
    filled = MeasuredData(
        source=path,
        kernel_name=data.kernel_name,
        device_name=data.device_name,
        problem_size=list(data.problem_size),
        tune_params={name: list(v) for name, v in zip(space.names, values)},
        configs=configs,
        measurements=measurements,
        recorded=data.recorded,
    )
    _write(filled, path)
    return Filled(filled, len(kept), _cross_validated(space, pairs, passed))


def _matched(space: SearchSpace, data: MeasuredData) -> list[tuple[int, Measurement]]:
    """(space id, measurement) of each of ``data``'s configurations that is one of the space's."""
    missing = [name for name in space.names if name not in data.tune_params]
    if missing:
        raise UserError(f"{data.source}: has no parameter {', '.join(missing)} of the spec's: not the same kernel")
    columns = [list(data.tune_params).index(name) for name in space.names]
    position = [{v: k for k, v in enumerate(space.tune_params[name])} for name in space.names]
    rows = np.array([[p.get(c[j], -1) for p, j in zip(position, columns)] for c in data.configs], dtype=np.int64)
    found = space.id_of(rows.reshape(len(data.configs), len(space.names)))
    pairs = [(int(i), m) for i, m in zip(found.tolist(), data.measurements) if i >= 0]
    if not pairs:
        raise UserError(f"{data.source}: none of its configurations is one of the spec's search space")
    return pairs


def _predicted(space: SearchSpace, pairs: Sequence[tuple[int, Measurement]], name: str, ids: list[int]) -> np.ndarray:
    """Measurement field ``name`` of each of ``ids``, as a cost model fitted on ``pairs`` predicts it.
    ``name`` is a phase's seconds, or the kernel time. ``pairs`` holds at least one."""
    model = CostModel(space)
    if name == "time_ms":
        model.learn_values([i for i, _ in pairs], [m.time_ms for _, m in pairs], TIME_FLOOR_MS)
    else:
        model.learn_values([i for i, _ in pairs], [getattr(m, name) for _, m in pairs])
    predicted = model.predict_s(ids)
    assert predicted is not None  # it learned from one at least
    return predicted


def _cross_validated(
    space: SearchSpace, pairs: Sequence[tuple[int, Measurement]], passed: Sequence[tuple[int, Measurement]]
) -> float | None:
    """The largest relative error, over the folds, of a held-out quarter's summed cost.
    The quarter is of the passing configurations; the phase models fitted on the rest predict it."""
    if len(passed) < MIN_CHECKED:
        return None
    order = np.random.default_rng(0).permutation(len(passed))[:MAX_CHECKED]
    worst = 0.0
    for fold in range(FOLDS):
        held = {passed[k][0] for k in order[fold::FOLDS].tolist()}
        rest = [(i, m) for i, m in pairs if i not in held]
        rest_passed = [(i, m) for i, m in rest if m.status == Status.OK]
        if not rest_passed:
            return None
        ids = sorted(held)
        guess_s = sum(
            float(_predicted(space, rest if name == "compile_s" else rest_passed, name, ids).sum()) for name in PHASES
        )
        actual_s = sum(m.compile_s + m.verify_s + m.benchmark_s for i, m in passed if i in held)
        worst = max(worst, abs(guess_s - actual_s) / max(actual_s, 1e-9))
    return worst


def _write(data: MeasuredData, path: str) -> None:
    """As a Kernel Tuner cache (times and durations in ms), which ``measured.load`` reads back."""
    cache = {}
    for config, m in zip(data.configs, data.measurements):
        entry: dict[str, object] = dict(zip(data.tune_params, config))
        entry["time"] = m.time_ms if m.status == Status.OK else _MARKERS.get(m.status, "RuntimeFailedConfig")
        if m.status == Status.OK:
            entry["times"] = m.times_ms
        entry.update(compile_time=1e3 * m.compile_s, verification_time=1e3 * m.verify_s)
        entry["benchmark_time"] = 1e3 * m.benchmark_s
        cache[",".join(str(v) for v in config)] = entry
    document = {
        "kernel_name": data.kernel_name,
        "device_name": data.device_name,
        "problem_size": data.problem_size,
        "tune_params_keys": list(data.tune_params),
        "tune_params": data.tune_params,
        "cache": cache,
    }
    with written_whole(path) as fh:
        fh.write(json.dumps(document).encode())
