"""The results near the best, kept as measured: calibration may reorder them as its factors change,
and confirmation picks its candidates from them. Only results that passed with a finite time count.
Once there are many, only those within ``KEEP_WITHIN`` times the best raw time stay: no device
factor is that large, so a slower one can be neither best nor candidate."""

from __future__ import annotations

import math
from collections.abc import Iterable

from mpitune.model.result import Scored

KEEP_WITHIN = 2.0
_PRUNE_AT = 4096


class Leaders:
    """Pruned once the list has doubled since the last pruning (at least ``_PRUNE_AT``). Adding a
    report then costs the same early and late in a run. Pruning at every report, once many were near
    the best, rebuilt the whole list each time."""

    def __init__(self) -> None:
        self.results: list[Scored] = []
        # Each rank's fastest as measured: in calibrated time (its raw time over its rank's
        # factor) the best of all is one of them, whatever the factors.
        self.fastest: dict[int, Scored] = {}
        self._best_ms = math.inf
        self._prune_at = _PRUNE_AT

    def add(self, results: Iterable[Scored]) -> None:
        for r in results:
            if r.ok and math.isfinite(r.time_ms):
                self.results.append(r)
                self._best_ms = min(self._best_ms, r.time_ms)
                if r.rank not in self.fastest or r.time_ms < self.fastest[r.rank].time_ms:
                    self.fastest[r.rank] = r
        if len(self.results) > self._prune_at:
            self.results = [r for r in self.results if r.time_ms <= KEEP_WITHIN * self._best_ms]
            self._prune_at = max(_PRUNE_AT, 2 * len(self.results))
