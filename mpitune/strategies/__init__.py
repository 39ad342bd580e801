"""Search strategies: one module each, found by name.

A strategy module defines ``create(space, seed, **options) -> Strategy``. Strategies speak
ask/tell (see ``base.Strategy``) and know nothing of ranks, devices, files or clocks.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from mpitune.strategies.base import Strategy

_NOT_STRATEGIES = {"base"}


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_STRATEGIES)


def create(name: str, space: Any, seed: int, options: dict[str, Any]) -> Strategy:
    """Raise ValueError naming the option when the strategy refuses its options."""
    if name not in available():
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"{__name__}.{name}")
    try:
        return module.create(space, seed, **options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"strategy {name!r}: {exc}") from None
