"""Backends run one configuration on one device. Each declares what it supports
(``CAPABILITIES``, see capabilities.py); the modules are imported only for that, and CuPy
only when a GPU backend is created, so that ``import mpitune`` needs neither a GPU nor CuPy.

A new backend is its module plus one line in ``_MODULES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from types import ModuleType

from mpitune.backends.base import Backend
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.model.problem import Kernel

_MODULES = ("cupy", "c", "replay")

__all__ = [
    "Backend",
    "Capabilities",
    "DeviceKind",
    "all_capabilities",
    "capabilities",
    "create",
    "prewarm",
    "resolve",
    "selectable",
    "warm_up",
]


@cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def all_capabilities() -> tuple[Capabilities, ...]:
    return tuple(_module(name).CAPABILITIES for name in _MODULES)


def capabilities(lang: str) -> Capabilities:
    """The declaration of the backend a problem's (resolved) ``lang`` names."""
    for caps in all_capabilities():
        if caps.lang == lang:
            return caps
    raise KeyError(lang)


def resolve(text: str) -> Capabilities | None:
    """The backend a spec's ``lang`` names (case-insensitive, aliases too); None if none does."""
    for caps in all_capabilities():
        if caps.selectable and text.lower() in caps.names():
            return caps
    return None


def selectable() -> list[str]:
    """The ``lang`` values a spec may use, by their recorded names."""
    return sorted(caps.lang for caps in all_capabilities() if caps.selectable)


def warm_up(lang: str) -> Callable[[], None] | None:
    """What a compile worker can run before its first configuration; None if nothing.

    Loading the compiler is then off the device's critical path.
    """
    return getattr(_module(capabilities(lang).module), "warm_up", None)


def prewarm(lang: str, local_rank: int | None) -> None:
    """Import the backend of ``lang`` and warm up what needs no problem.

    On a GPU that is CuPy, and the CUDA context of the device of ``local_rank``. None: not yet
    known, no device. ``create`` and ``prepare`` then find it done. A backend module says how
    in its ``prewarm``.
    """
    warm = getattr(_module(capabilities(lang).module), "prewarm", None)
    if warm is not None:
        warm(local_rank)


def create(kernel: Kernel, workdir: str, local_rank: int, rank: int | None = None) -> Backend:
    """This rank's backend.

    ``local_rank`` is its place among the ranks of its node: which GPU. ``rank`` is its place in
    the whole job (None: ``local_rank``, as on one node). A simulated device has no GPU to tell
    it apart but its rank, so it alone is given ``rank``. A biased replay gives each rank its
    own device's factor.
    """
    caps = capabilities(kernel.lang)
    if caps.simulated_clock:
        return _module(caps.module).create(kernel, workdir, local_rank, local_rank if rank is None else rank)
    return _module(caps.module).create(kernel, workdir, local_rank)
