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


def _strides(sizes: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.append(acc)
        acc *= size
    return strides[::-1]
