"""One configuration on its way to a device: its id, its values, and what rank 0 resolved for it.

Rank 0 turns each id the strategy proposes into a ``Work`` once, when it hands the batch out;
the order carries it to the rank, the rank to its compile workers and its measuring worker, and
rank 0 keeps it beside the batch in flight to score the result that comes back. No room turns
the id into a configuration again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpitune.model.kernel_extras import Derived


@dataclass(frozen=True)
class Work:
    config_id: int
    config: Mapping[str, Any]  # parameter name -> value
    derived: Derived | None = None  # what the spec's per-configuration callables gave (kernel_extras.py)
