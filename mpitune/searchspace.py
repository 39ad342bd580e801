"""The valid configurations of a problem, with stable integer ids.

The space is held as one small integer matrix: row ``i`` is configuration id ``i`` and
holds, per parameter, the index of its value in ``tune_params``. Rows are in
Cartesian-product order (last parameter fastest, like ``itertools.product``), so the
same problem always gives the same ids, on every rank and in every rerun.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .restrictions import Restriction


def _index_dtype(n_values: int) -> np.dtype:
    return np.dtype(np.uint8 if n_values <= 256 else np.uint16 if n_values <= 65536 else np.uint32)


class SearchSpace:
    def __init__(self, tune_params: dict[str, list], indices: np.ndarray):
        self.tune_params = tune_params
        self.names = list(tune_params)
        self.indices = indices
        self.sizes = np.array([len(v) for v in tune_params.values()], dtype=np.int64)
        self._lookup: np.ndarray | dict | None = None  # built on first id_of
        self._unit: np.ndarray | None = None

    @classmethod
    def build(cls, tune_params: dict[str, list],
              restrictions: Iterable[Restriction | Callable] = ()) -> "SearchSpace":
        """Enumerate the Cartesian product and keep the rows every restriction accepts."""
        sizes = [len(v) for v in tune_params.values()]
        total = int(np.prod(sizes, dtype=np.int64))
        flat = np.arange(total, dtype=np.int64)
        indices = np.empty((total, len(sizes)), dtype=_index_dtype(max(sizes)))
        for j, (size, stride) in enumerate(zip(sizes, _strides(sizes))):
            indices[:, j] = (flat // stride) % size
        return cls(tune_params, indices).restricted(restrictions)

    def restricted(self, restrictions: Iterable[Restriction | Callable]) -> "SearchSpace":
        """The configurations every restriction accepts, in the same order.

        String restrictions run on whole columns (numpy); callables, which may do anything,
        run once per configuration that survived the strings, with the config as a dict.
        """
        values = [np.asarray(v, dtype=object if isinstance(v[0], str) else None)
                  for v in self.tune_params.values()]
        keep = np.ones(len(self), dtype=bool)
        callables = []
        for r in restrictions:
            if isinstance(r, Restriction):
                rows = np.flatnonzero(keep)
                cols = {n: values[j][self.indices[rows, j]] for j, n in enumerate(self.names) if n in r.names}
                keep[rows[~r.evaluate(cols)]] = False
            else:
                callables.append(r)
        space = SearchSpace(self.tune_params, self.indices[keep])
        if callables:
            ok = np.fromiter((all(bool(fn(space.config(i))) for fn in callables)
                              for i in range(len(space))), dtype=bool, count=len(space))
            space = SearchSpace(self.tune_params, space.indices[ok])
        return space

    @classmethod
    def from_configs(cls, tune_params: dict[str, list], configs: Iterable[tuple]) -> "SearchSpace":
        """A space of exactly the given configurations (value tuples in ``tune_params`` order),
        e.g. those present in measured data; ids follow Cartesian order as in ``build``."""
        position = [{v: i for i, v in enumerate(values)} for values in tune_params.values()]
        dtype = _index_dtype(max(len(v) for v in tune_params.values()))
        rows = sorted({tuple(p[v] for p, v in zip(position, config)) for config in configs})
        indices = np.array(rows, dtype=dtype).reshape(len(rows), len(tune_params))
        return cls(tune_params, indices)

    def __len__(self) -> int:
        return len(self.indices)

    def config(self, config_id: int) -> dict:
        """Parameter name -> value of one configuration, as plain Python values."""
        row = self.indices[config_id]
        return {name: self.tune_params[name][int(i)] for name, i in zip(self.names, row)}


    def id_of(self, rows: np.ndarray) -> np.ndarray:
        """Config id of each index row (one row or a matrix of them), -1 where a row is not a
        valid configuration (a value index out of range, or a row the restrictions removed).

        Rows are stored in Cartesian order, so their mixed-radix keys are already sorted and a
        lookup is one ``searchsorted``; strategies map thousands of candidate rows per batch.
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

    def _build_lookup(self) -> np.ndarray | dict:
        if int(np.prod(self.sizes.astype(object))) >= 2**62:
            return {tuple(r): i for i, r in enumerate(self.indices.tolist())}
        return self.indices.astype(np.int64) @ np.array(_strides(self.sizes.tolist()), dtype=np.int64)

    def neighbours(self, config_id: int, adjacent: bool = False) -> np.ndarray:
        """Ids of the valid configurations that differ from ``config_id`` in one parameter:
        in any value (Hamming distance 1), or with ``adjacent`` only in the next value up or
        down, for parameters whose values are ordered. Ascending per parameter."""
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

    def unit_coordinates(self) -> np.ndarray:
        """Every configuration as a point in [0, 1]^n_params (value index / (n_values - 1)), for
        strategies that move through a continuous space and snap back to configurations."""
        if self._unit is None:
            scale = np.maximum(self.sizes - 1, 1).astype(np.float64)
            self._unit = self.indices.astype(np.float64) / scale
        return self._unit


def _strides(sizes: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.append(acc)
        acc *= size
    return strides[::-1]
