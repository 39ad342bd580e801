"""Backends run one configuration on one device. One module per language, imported lazily
so that ``import mpitune`` needs neither a GPU nor CuPy."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from mpitune.backends.base import Backend

_MODULES = {"C": "c", "cupy": "cupy_nvrtc", "replay": "replay"}


def _module(lang: str):
    return importlib.import_module(f"{__name__}.{_MODULES[lang]}")


def device_kind(lang: str) -> str:
    """Where a language's kernels run: "gpu", "cpu" (compiling beside it would disturb the
    timings) or "none" (a replay compiles nothing)."""
    return _module(lang).DEVICE


def warm_up(lang: str) -> Callable[[], None] | None:
    """What a compile worker can run before its first configuration, so that loading the
    compiler is not on the device's critical path; None if nothing."""
    return getattr(_module(lang), "warm_up", None)


def check(problem) -> None:
    """Refuse, with ValueError, what this problem's backend cannot run; touches no device."""
    _module(problem.lang).check(problem)


def create(problem, workdir: str) -> Backend:
    return _module(problem.lang).create(problem, workdir)
