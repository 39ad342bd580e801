"""Records as rank 0 makes them, for tests that feed strategies, the file or the objective."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from mpitune.model.objective import Objective
from mpitune.model.result import Result, Scored, Status

TIME = Objective()


def scored(
    config_id: int,
    status: str = "ok",
    config: Mapping[str, Any] | None = None,
    scores: Sequence[float] | None = None,
    **fields: Any,
) -> Scored:
    """A result scored by the kernel time (or given ``scores``), with ``config``."""
    if "times_ms" in fields:
        fields["times_ms"] = tuple(fields["times_ms"])
    record = TIME.evaluate(Result(config_id, Status(status), **fields), config or {})
    return record if scores is None else dataclasses.replace(record, scores=tuple(scores))


def append(
    cache: Any,
    results: Sequence[Result],
    configs: Sequence[Mapping[str, Any]],
    phases: Any = (),
    done_batch: int | None = None,
) -> None:
    """``cache.append`` of ``results`` scored by the file's objective, each with its config."""
    cache.append([cache.objective.evaluate(r, c) for r, c in zip(results, configs)], phases, done_batch)
