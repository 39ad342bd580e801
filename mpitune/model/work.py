"""What rank 0 hands a device, and what each rank answers.

Rank 0 hands one configuration on its way (``Work``), or launches to time again after the search
(``Retime``). A rank answers those with ``Launch``.

Rank 0 turns each id the strategy proposes into a ``Work`` once, when it hands the batch out.
The order carries it to the rank. The rank hands it to its compile workers and its measuring
worker. Rank 0 keeps it beside the batch in flight, to score the result that comes back. No room
turns the id into a configuration again.

The search times each configuration once, on whichever rank it was dealt to. So its median
carries that device's bias and one draw of noise. Confirmation (model/judging/confirmation.py)
times the few candidates again in turn, round after round, on the same devices. So slow drift
and a device's bias hit every candidate alike and can be taken out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mpitune.model.kernel_extras import Derived


@dataclass(frozen=True)
class Work:
    config_id: int
    config: Mapping[str, Any]  # parameter name -> value
    derived: Derived | None = None  # what the spec's per-configuration callables gave (kernel_extras.py)
    # Compiled before in this run (a candidate or reference timed again): a kernel cache that
    # reaches this rank holds its image, which a replay charges as a load (backends/replay.py).
    again: bool = False


DEFAULT_CANDIDATES = 5  # the best candidates confirmed, besides those tied with the best in the search
MOST_CANDIDATES = 16  # at most this many: each costs a compile and its launches on every rank


@dataclass(frozen=True)
class Retime:
    """Time each of ``work`` once per round, for ``rounds`` rounds, interleaved.

    Round r launches every candidate once, in an order rotated by r. So no candidate always
    follows the same one."""

    work: tuple[Work, ...]
    rounds: int
    phase: str = "confirm"  # the timeline's name for it: confirm, or calibrate for a reference

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(w.config_id for w in self.work)

    @classmethod
    def of(cls, work: Iterable[Work], rounds: int, phase: str = "confirm") -> Retime:
        """Configurations the search measured, timed again: each marked ``again``."""
        return cls(tuple(dataclasses.replace(w, again=True) for w in work), rounds, phase)


@dataclass(frozen=True)
class Launch:
    """One timed launch of a candidate: its round and its time.

    The time is NaN when the candidate could not be launched. It failed to compile or load
    here, or its launch failed."""

    config_id: int
    round: int
    time_ms: float
