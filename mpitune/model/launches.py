"""Launches timed again after the search, interleaved: what rank 0 orders (``Retime``) and what
each rank's backend answers (``Launch``), one record per timed launch.

The search times each configuration once, on whichever rank it was dealt to, so its median
carries that device's bias and one draw of noise. Confirmation (model/confirmation.py) times
the few candidates again in turn, round after round, on the same devices, so that slow drift
and a device's bias hit every candidate alike and can be taken out.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpitune.model.work import Work

DEFAULT_CANDIDATES = 5  # the best candidates confirmed, besides those tied with the best in the search
MOST_CANDIDATES = 16  # at most this many: each costs a compile and its launches on every rank


@dataclass(frozen=True)
class Retime:
    """Time each of ``work`` once per round, for ``rounds`` rounds, interleaved: round r
    launches every candidate once, in an order rotated by r, so that no candidate always
    follows the same one."""

    work: tuple[Work, ...]
    rounds: int
    phase: str = "confirm"  # the timeline's name for it: confirm, or calibrate for a reference

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(w.config_id for w in self.work)


@dataclass(frozen=True)
class Launch:
    """One timed launch of a candidate: its round and its time, NaN when the candidate could
    not be launched (it failed to compile or load here, or its launch failed)."""

    config_id: int
    round: int
    time_ms: float
