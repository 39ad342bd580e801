"""What ``report`` keeps of a file's results rows as they stream past, a slice at a time.

It keeps counts and a few numbers per row. These are the objective, whether it counts, the id
and the time where it passed. Once all rows have passed, they give the best and the median. They
also name the rows worth reading again. A row's text (error, host, device) is most of its
1.5 KB and is never kept. A report of 200,000 configurations holds about 40 bytes per row.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from mpitune.model.result import Status
from mpitune.offline import confirmation as confirmed
from mpitune.offline.confirmation import Throttled
from mpitune.offline.ranking import usable_rows
from mpitune.store.reader import CacheData


class Tally:
    """The results rows, counted and reduced as they come (``add``), in the file's order."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.measured: Counter[int] = Counter()  # configurations measured, by rank
        self.throttled: list[Throttled] = []
        self.rows = 0
        self._last_run = (-1, -1)  # the latest run that recorded a result, and its first row
        self._values: list[np.ndarray] = []  # the objective, per row
        self._usable: list[np.ndarray] = []  # whether the row's objective counts (``ranking.usable``)
        self._ids: list[np.ndarray] = []
        self._ok_ms: list[np.ndarray] = []  # the time of each row that passed
        self._objectives: list[np.ndarray] = []  # every objective, per row, with several

    def add(self, part: CacheData) -> None:
        results = part.results
        ok = results["status"] == Status.OK
        every = part.objective_values()  # a new array: it keeps nothing of the slice
        values = every[:, 0].copy()
        self.statuses.update(results["status"])
        self.measured.update(results["rank"].tolist())
        self.throttled += confirmed.throttled(part)
        if len(results) and int(results["run"].max()) > self._last_run[0]:
            latest = int(np.argmax(results["run"]))
            self._last_run = (int(results["run"][latest]), self.rows + latest)
        self.rows += len(results)
        self._values.append(values)
        self._usable.append(usable_rows(ok, values, part.objective.higher_is_better))
        self._ids.append(results["config_id"].astype(np.int64))
        self._ok_ms.append(results["time_ms"][ok])
        if part.objective.several:
            self._objectives.append(every)

    @property
    def values(self) -> np.ndarray:
        return _joined(self._values, np.float64)

    @property
    def usable(self) -> np.ndarray:
        return _joined(self._usable, bool)

    @property
    def config_ids(self) -> np.ndarray:
        return _joined(self._ids, np.int64)

    @property
    def ok_ms(self) -> np.ndarray:
        return _joined(self._ok_ms, np.float64)

    def objectives(self, count: int) -> np.ndarray:
        """(rows, ``count``): every objective's value per row, as ``CacheData.objective_values``."""
        return np.concatenate(self._objectives) if self._objectives else np.zeros((0, count))

    def first_rows(self, config_ids: set[int]) -> list[int]:
        """The rows the confirmation's summary reads (``confirmation.latest``), in row order.

        These are the first row of each of ``config_ids`` that the file holds. The first row of
        the latest run says whether a search followed a confirmation.
        """
        ids = self.config_ids
        rows = {int(np.flatnonzero(ids == i)[0]) for i in config_ids if (ids == i).any()}
        return sorted(rows | ({self._last_run[1]} if self._last_run[1] >= 0 else set()))


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)
