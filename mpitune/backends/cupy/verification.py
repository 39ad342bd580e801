"""Verification on the GPU with the rule every backend shares (backends/compare.py).

Outputs and answers stay on the device: the count of wrong values is one fused reduction
(no temporary the size of an output), and only that count comes back to the host, plus the
largest difference when something is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mpitune.backends.compare import mismatch, wrong


class GpuCheck:
    """The answers of one run, uploaded, and the comparison of a configuration's outputs with
    them on the backend's stream."""

    def __init__(self, cp: Any, stream: Any, answers: Sequence[Any] | None, atol: float):
        self._cp = cp
        self._stream = stream
        self._answers = answers
        self._atol = atol

        @cp.fuse(kernel_name="mpitune_count_wrong")
        def count(got: Any, expected: Any, atol: Any) -> Any:
            return cp.sum(wrong(cp, got, expected, atol))

        self._fused_count = count

    def _count_wrong(self, got: Any, expected: Any, atol: float) -> int:
        return int(self._fused_count(got, expected, np.float64(atol)))

    def warm_up(self, outputs: Sequence[Any]) -> None:
        """Compile the reduction for each output's types now, not during the first configuration."""
        with self._stream:
            for got, expected in zip(outputs, self._answers or ()):
                if expected is not None:
                    self._count_wrong(got, expected, self._atol)

    def mismatch(self, outputs: Sequence[Any]) -> str:
        """As ``compare.mismatch``: empty when every checked output matches, else why not."""
        with self._stream:
            return mismatch(self._cp, outputs, self._answers, self._atol, self._count_wrong)
