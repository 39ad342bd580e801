"""Verification on the GPU with the rule every backend shares (backends/compare.py).

Outputs and answers stay on the device. The count of wrong values is a fused reduction, with
no temporary the size of an output. Only that count comes back to the host, and the largest
difference when something is wrong.

CuPy gives a reduction one thread block per value it reduces to. A count over a whole output
thus ran on one block, as long as the kernel verified (docs/performance.md, "Counting wrong
values"). So the count is taken over rows of ``ROW`` values, one block each. The rows' counts
are summed, with the few values that fill no row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mpitune.backends.compare import mismatch, wrong

ROW = 1 << 16  # values per partial count: a 16M-value output gives 256 blocks


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

        @cp.fuse(kernel_name="mpitune_count_wrong_rows")
        def count_rows(got: Any, expected: Any, atol: Any) -> Any:
            return cp.sum(wrong(cp, got, expected, atol), axis=1)

        self._fused_count, self._fused_rows = count, count_rows

    def _count_wrong(self, got: Any, expected: Any, atol: float) -> int:
        got, expected, limit = got.ravel(), expected.ravel(), np.float64(atol)
        rows = got.size // ROW
        if not rows:
            return int(self._fused_count(got, expected, limit))
        whole = rows * ROW
        total = self._fused_rows(got[:whole].reshape(rows, ROW), expected[:whole].reshape(rows, ROW), limit).sum()
        if whole < got.size:
            total += self._fused_count(got[whole:], expected[whole:], limit)
        return int(total)

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
