"""The ask/tell contract every strategy follows."""

from __future__ import annotations

from collections.abc import Iterable

from ..result import Result


class Strategy:
    """Proposes configuration ids in batches and learns from their results.

    ``ask(n)`` returns up to ``n`` ids never handed out or told before; an empty list
    means the search is finished. ``tell`` receives results in any order, including,
    before the first ask, everything a resumed run already has in its cache.
    Deterministic for a given seed and sequence of tells.
    """

    def __init__(self, space, seed: int):
        self.space = space
        self.seed = seed
        self.seen: set[int] = set()  # handed out or told: never proposed again

    def ask(self, n: int) -> list[int]:
        raise NotImplementedError

    def tell(self, results: Iterable[Result]) -> None:
        self.seen.update(r.config_id for r in results)
