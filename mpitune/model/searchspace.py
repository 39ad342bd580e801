"""The valid configurations of a problem, with stable integer ids.

The space is held as one small integer matrix. Row ``i`` is configuration id ``i``. It holds,
per parameter, the index of its value in ``tune_params``. Rows are in Cartesian-product order,
last parameter fastest, like ``itertools.product``. So the same problem always gives the same
ids, on every rank and in every rerun.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from mpitune.model.restrictions import Restriction

# Rows of the Cartesian product made and filtered at a time by ``build`` and ``restricted``.
_BLOCK_ROWS = 1 << 20
# The most configurations ``build`` enumerates: every row of the Cartesian product is made and
# filtered, restrictions or not, at about 4 million rows a second on one busy core (a billion:
# minutes, past the default --load-timeout) and into a table of one byte per parameter and row.
MAX_CONFIGURATIONS = 10**9
_ADVICE = "give parameters fewer values, or fix some to one value and tune the rest in a later run"


class SpaceTooLarge(ValueError):
    """A Cartesian product too large to enumerate, or whose table cannot be allocated."""


def too_large(sizes: Sequence[int]) -> str | None:
    """Why a product of parameters with ``sizes`` values each is too large to enumerate, or None.

    Restrictions cannot help: they filter the product, which is enumerated first."""
    total = math.prod(sizes)
    if total <= MAX_CONFIGURATIONS:
        return None
    return (
        f"the search space has {total:,} configurations ({' x '.join(map(str, sizes))} values), more than "
        f"the {MAX_CONFIGURATIONS:,} mpitune enumerates before restrictions apply; {_ADVICE}"
    )


def _index_dtype(n_values: int) -> np.dtype:
    return np.dtype(np.uint8 if n_values <= 256 else np.uint16 if n_values <= 65536 else np.uint32)


class SearchSpace:
    def __init__(self, tune_params: dict[str, list[Any]], indices: np.ndarray):
        self.tune_params = tune_params
        self.names = list(tune_params)
        self.indices = indices
        self.sizes = np.array([len(v) for v in tune_params.values()], dtype=np.int64)
        self._lookup: np.ndarray | dict[tuple[int, ...], int] | None = None  # built on first id_of
        self._scale = np.maximum(self.sizes - 1, 1).astype(np.float64)  # value index -> [0, 1]

    @classmethod
    def build(
        cls, tune_params: dict[str, list[Any]], restrictions: Iterable[Restriction | Callable[..., bool]] = ()
    ) -> SearchSpace:
        """Enumerate the Cartesian product and keep the rows every restriction accepts.

        The product is made and filtered by the restriction strings a block of rows at a time.
        So the peak memory is the table of valid rows plus one block's temporaries. It is not
        several int64 copies of the whole product. docs/performance.md has what that saves."""
        restrictions = list(restrictions)
        sizes = [len(v) for v in tune_params.values()]
        refusal = too_large(sizes)
        if refusal:
            raise SpaceTooLarge(refusal)
        total = math.prod(sizes)
        strides = _strides(sizes)
        columns = _value_columns(tune_params)
        dtype = _index_dtype(max(sizes))
        try:
            indices = np.empty((total, len(sizes)), dtype=dtype)
        except MemoryError:
            raise SpaceTooLarge(
                f"the table of the search space's {total:,} configurations needs "
                f"{total * len(sizes) * dtype.itemsize / 1e9:.3g} GB, more than this process can allocate; {_ADVICE}"
            ) from None
        kept = 0
        for start in range(0, total, _BLOCK_ROWS):
            flat = np.arange(start, min(start + _BLOCK_ROWS, total), dtype=np.int64)
            block = np.empty((len(flat), len(sizes)), dtype=indices.dtype)
            for j, (size, stride) in enumerate(zip(sizes, strides)):
                block[:, j] = (flat // stride) % size
            block = block[_accepted(block, columns, restrictions)]
            indices[kept : kept + len(block)] = block
            kept += len(block)
        indices.resize((kept, len(sizes)), refcheck=False)  # in place: no second copy of the table
        return cls(tune_params, indices)._with_callables(restrictions)

    def restricted(self, restrictions: Iterable[Restriction | Callable[..., bool]]) -> SearchSpace:
        """The configurations every restriction accepts, in the same order.

        String restrictions run on whole columns (numpy), a block of rows at a time. Callables
        may do anything. They run once per configuration that survived the strings, with the
        config as a dict.
        """
        restrictions = list(restrictions)
        columns = _value_columns(self.tune_params)
        keep = np.concatenate(
            [
                _accepted(self.indices[s : s + _BLOCK_ROWS], columns, restrictions)
                for s in range(0, len(self), _BLOCK_ROWS)
            ]
            or [np.ones(0, dtype=bool)]
        )
        return SearchSpace(self.tune_params, self.indices[keep])._with_callables(restrictions)

    def _with_callables(self, restrictions: list[Restriction | Callable[..., bool]]) -> SearchSpace:
        callables = [r for r in restrictions if not isinstance(r, Restriction)]
        if not callables:
            return self
        ok = np.fromiter(
            (all(bool(fn(self.config(i))) for fn in callables) for i in range(len(self))), dtype=bool, count=len(self)
        )
        return SearchSpace(self.tune_params, self.indices[ok])

    @classmethod
    def from_configs(cls, tune_params: dict[str, list[Any]], configs: Iterable[tuple[Any, ...]]) -> SearchSpace:
        """A space of exactly the given configurations, value tuples in ``tune_params`` order.

        They may be those present in measured data. Ids follow Cartesian order as in ``build``."""
        position = [{v: i for i, v in enumerate(values)} for values in tune_params.values()]
        dtype = _index_dtype(max(len(v) for v in tune_params.values()))
        rows = sorted({tuple(p[v] for p, v in zip(position, config)) for config in configs})
        indices = np.array(rows, dtype=dtype).reshape(len(rows), len(tune_params))
        return cls(tune_params, indices)

    def __len__(self) -> int:
        return len(self.indices)

    def config(self, config_id: int) -> dict[str, Any]:
        """Parameter name -> value of one configuration, as plain Python values."""
        row = self.indices[config_id]
        return {name: self.tune_params[name][int(i)] for name, i in zip(self.names, row)}

    def id_of(self, rows: np.ndarray) -> np.ndarray:
        """Config id of each index row (one row or a matrix of them).

        It is -1 where a row is not a valid configuration. Such a row has a value index out of
        range, or the restrictions removed it.

        Rows are stored in Cartesian order, so their mixed-radix keys are already sorted. So a
        lookup is one ``searchsorted``. Strategies map thousands of candidate rows per batch.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(self.names))
        inside = np.all((rows >= 0) & (rows < self.sizes), axis=1)
        if len(self) == 0:
            return np.full(len(rows), -1, dtype=np.int64)
        if self._lookup is None:
            self._lookup = self._build_lookup()
        if isinstance(self._lookup, dict):  # mixed-radix keys would overflow int64
            found = [self._lookup.get(tuple(r), -1) if ok else -1 for r, ok in zip(rows.tolist(), inside)]
            return np.array(found, dtype=np.int64)
        keys = rows @ np.array(_strides(self.sizes.tolist()), dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._lookup, keys), len(self) - 1)
        return np.where(inside & (self._lookup[pos] == keys), pos, -1)

    def _build_lookup(self) -> np.ndarray | dict[tuple[int, ...], int]:
        if int(np.prod(self.sizes.astype(object))) >= 2**62:
            return {tuple(r): i for i, r in enumerate(self.indices.tolist())}
        strides = np.array(_strides(self.sizes.tolist()), dtype=np.int64)
        keys = np.empty(len(self), dtype=np.int64)
        for start in range(0, len(self), _BLOCK_ROWS):  # no int64 copy of the whole table
            keys[start : start + _BLOCK_ROWS] = self.indices[start : start + _BLOCK_ROWS].astype(np.int64) @ strides
        return keys

    def neighbours(self, config_id: int, adjacent: bool = False) -> np.ndarray:
        """Ids of the valid configurations that differ from ``config_id`` in one parameter.

        They differ in any value (Hamming distance 1). With ``adjacent``, only the next value up
        or down counts, for parameters whose values are ordered. Ascending per parameter."""
        row = self.indices[config_id].astype(np.int64)
        blocks = []
        for p, size in enumerate(self.sizes.tolist()):
            if adjacent:
                values = np.array([v for v in (row[p] - 1, row[p] + 1) if 0 <= v < size], dtype=np.int64)
            else:
                values = np.delete(np.arange(size, dtype=np.int64), row[p])
            block = np.repeat(row[None, :], len(values), axis=0)
            block[:, p] = values
            blocks.append(block)
        ids = self.id_of(np.concatenate(blocks)) if blocks else np.empty(0, dtype=np.int64)
        return ids[ids >= 0]

    def unit_coordinates(self, ids: int | Sequence[int] | np.ndarray) -> np.ndarray:
        """Configurations ``ids`` (an id or an array of them) as points in [0, 1]^n_params.

        A coordinate is value index / (n_values - 1). Strategies move through a continuous space
        and snap back to configurations. The points are computed from the index table on each
        call. Kept for the whole space, they would cost 56 bytes per configuration with 7
        parameters. That is more than half a gigabyte for 10 million."""
        coordinates: np.ndarray = self.indices[ids].astype(np.float64) / self._scale
        return coordinates


def _value_columns(tune_params: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """Each parameter's values as an array that value indices can pick from."""
    return {n: np.asarray(v, dtype=object if isinstance(v[0], str) else None) for n, v in tune_params.items()}


def _accepted(rows: np.ndarray, columns: dict[str, np.ndarray], restrictions: list[Any]) -> np.ndarray:
    """Which of ``rows`` (value indices) every restriction string accepts.

    Callables are left to ``SearchSpace._with_callables``."""
    keep = np.ones(len(rows), dtype=bool)
    for r in restrictions:
        if isinstance(r, Restriction):
            at = np.flatnonzero(keep)
            cols = {n: values[rows[at, j]] for j, (n, values) in enumerate(columns.items()) if n in r.names}
            keep[at[~r.evaluate(cols)]] = False
    return keep


def _strides(sizes: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.append(acc)
        acc *= size
    return strides[::-1]
