"""What "an output matches its answer" means, written once for every backend.

The rule is written against an array module, ``xp``: numpy on the host, CuPy on the GPU. So the
C backend compares its outputs with numpy. The CuPy backend compares them where they are, on
the GPU, in one fused reduction (cupy/verification.py). Both report a mismatch in the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# (got, expected, atol) -> how many values are wrong; a backend may pass a faster one than the
# default (the GPU's fused reduction), computing the same ``wrong``.
CountWrong = Callable[[Any, Any, float], int]


def differences(xp: Any, got: Any, expected: Any) -> Any:
    """|got - expected| in float64 (complex128 when either is complex): exact for every float32
    output, so whether a value passes does not depend on the precision the kernel wrote in."""
    wide = xp.result_type(got.dtype, expected.dtype, xp.float64)
    return xp.abs(got.astype(wide) - expected.astype(wide))


def wrong(xp: Any, got: Any, expected: Any, atol: float) -> Any:
    """Where ``got`` differs from ``expected`` by more than ``atol``; a NaN never matches."""
    return ~(differences(xp, got, expected) <= atol)


def largest_difference(xp: Any, got: Any, expected: Any) -> float:
    """The worst difference ignoring NaNs, which the count already reports (NaN if all are)."""
    diff = differences(xp, got, expected)
    return float("nan") if bool(xp.isnan(diff).all()) else float(xp.nanmax(diff))


def mismatch(
    xp: Any, outputs: Sequence[Any], answer: Sequence[Any] | None, atol: float, count_wrong: CountWrong | None = None
) -> str:
    """Empty when every checked output matches its answer within ``atol``, else why the first
    one does not. Outputs and answers have the same shapes (the spec layer checks)."""
    if answer is None:
        return ""
    if count_wrong is None:

        def count_wrong(got: Any, expected: Any, atol: float) -> int:
            return int(xp.count_nonzero(wrong(xp, got, expected, atol)))

    for i, (got, expected) in enumerate(zip(outputs, answer)):
        if expected is None:
            continue
        got, expected = xp.asarray(got), xp.asarray(expected)
        bad = count_wrong(got, expected, atol)
        if bad:
            return (
                f"argument {i}: {bad} of {got.size} values differ by more than atol={atol:g} "
                f"(largest difference {largest_difference(xp, got, expected):g})"
            )
    return ""
