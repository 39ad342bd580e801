"""The values of a ``tune_kernel`` call, carried to the ranks of an MPI job as plain data.

Nothing mpitune reads may make it run code. So the call's keyword values travel as JSON plus
one ``.npz`` of the arrays, read with ``allow_pickle=False``, never as a pickle. They may be
dicts, lists, tuples, strings, numbers, booleans, None, numpy arrays and scalars. NVML observers
travel by their settings. Anything else is refused, naming the keyword.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from mpitune.errors import SpecError
from mpitune.observers import NVMLObserver

_ARRAYS, _VALUES = ".npz", ".json"


class _Unsendable(TypeError):
    pass


def save_call(stem: str, names: Mapping[str, Any], origin: str) -> None:
    """``stem.json`` and ``stem.npz`` holding ``names``; SpecError naming a value that is not plain data."""
    arrays: dict[str, np.ndarray] = {}
    encoded = {}
    for name, value in names.items():
        try:
            encoded[name] = _encode(value, arrays)
        except _Unsendable as exc:
            raise SpecError(origin, name, f"cannot be sent to the ranks of an MPI job: {exc}") from None
    np.savez(stem + _ARRAYS, *arrays.values())  # numpy names them arr_0, arr_1, ... in this order
    with open(stem + _VALUES, "w", encoding="utf-8") as fh:
        json.dump(encoded, fh)


def load_call(stem: str) -> dict[str, Any]:
    with np.load(stem + _ARRAYS, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    with open(stem + _VALUES, encoding="utf-8") as fh:
        return {name: _decode(value, arrays) for name, value in json.load(fh).items()}


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):  # before float: np.float64 is a float too
        if np.asarray(value).dtype.hasobject:
            raise _Unsendable("an array of Python objects")
        key = f"arr_{len(arrays)}"
        arrays[key] = np.asarray(value)
        return {"array" if isinstance(value, np.ndarray) else "scalar": key}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, NVMLObserver):
        return {"nvml_observer": {"observables": value.observables, "continuous_duration": value.continuous_duration}}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, arrays) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    if isinstance(value, Mapping):
        return {"dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    raise _Unsendable(f"a {type(value).__name__} is not plain data")


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    ((kind, body),) = value.items()
    if kind == "array":
        return arrays[body]
    if kind == "scalar":
        return arrays[body][()]
    if kind == "tuple":
        return tuple(_decode(v, arrays) for v in body)
    if kind == "nvml_observer":
        return NVMLObserver(**body)
    return {_decode(k, arrays): _decode(v, arrays) for k, v in body}
