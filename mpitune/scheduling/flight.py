"""What rank 0's Manager keeps of a run: the setup it searches with, and each batch in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

from mpitune.model.prior import Prior
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.searchspace import SearchSpace
from mpitune.model.work import Retime, Work
from mpitune.strategies.base import Strategy


@dataclass
class Flight:
    """One batch handed out and not yet recorded: its configurations by id (what scores the
    results that come back) and its chunks, rank by rank."""

    work: dict[int, Work]
    chunks: list[list[int]] = field(default_factory=list)
    retime: Retime | None = None  # the confirmation instead of a batch of the search


@dataclass
class Setup:
    """What rank 0 alone holds: the validated spec, the space and the strategy."""

    problem: Problem
    settings: RunSettings
    space: SearchSpace
    strategy: Strategy
    prior: Prior | None = None  # what the strategy started from (model/prior.py)
