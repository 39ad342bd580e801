"""The one rule for "an output matches its answer", on the host (numpy): the C backend's
messages, word for word; the GPU runs the same functions through CuPy (test_cupy.py)."""

import numpy as np
import pytest

from mpitune.backends.compare import largest_difference, mismatch, wrong

NAN = float("nan")


# (outputs, answer, atol, the message): the GPU's check must give the same (test_cupy.py).
MESSAGES = [
    (
        [np.array([1, 2, 3], np.float32)],
        [np.array([1, 2, 3.5], np.float32)],
        1e-6,
        "argument 0: 1 of 3 values differ by more than atol=1e-06 (largest difference 0.5)",
    ),
    ([np.array([1.0, 2.0])], [np.array([1.05, 2.0])], 0.1, ""),
    ([np.array([0.0, 0.5], np.float32)], [np.array([0.5, 0.5], np.float32)], 0.5, ""),  # atol itself passes
    (
        [np.array([NAN, 1.0, 5.0], np.float32)],
        [np.array([0.0, 1.0, 1.0], np.float32)],
        1e30,
        "argument 0: 1 of 3 values differ by more than atol=1e+30 (largest difference 4)",
    ),
    (
        [np.full((2, 2), NAN)],
        [np.zeros((2, 2))],
        1e-6,
        "argument 0: 4 of 4 values differ by more than atol=1e-06 (largest difference nan)",
    ),
    (
        [np.arange(10, dtype=np.int32)],
        [np.arange(10, dtype=np.int32) * 2],
        0.5,
        "argument 0: 9 of 10 values differ by more than atol=0.5 (largest difference 9)",
    ),
    (
        [np.array([0, 5], np.uint8)],
        [np.array([3, 5], np.uint8)],
        1,  # no unsigned wrap-around
        "argument 0: 1 of 2 values differ by more than atol=1 (largest difference 3)",
    ),
    (
        [np.array([True, False, True])],
        [np.array([True, True, True])],
        0.0,
        "argument 0: 1 of 3 values differ by more than atol=0 (largest difference 1)",
    ),
    (
        [np.array([1 + 1j, 2], np.complex64)],
        [np.array([1 + 3j, 2], np.complex64)],
        1e-3,
        "argument 0: 1 of 2 values differ by more than atol=0.001 (largest difference 2)",
    ),
    (
        [np.ones(4, np.float32), np.zeros((2, 3)), np.int32(4)],
        [None, np.ones((2, 3)), None],
        1e-6,
        "argument 1: 6 of 6 values differ by more than atol=1e-06 (largest difference 1)",
    ),
    ([np.ones(4)], None, 1e-6, ""),
    ([np.array([2**53 + 1], np.int64)], [np.array([2**53], np.int64)], 0.5, ""),  # compared in float64
]


@pytest.mark.parametrize("outputs, answer, atol, message", MESSAGES)
def test_messages_on_the_host(outputs, answer, atol, message):
    assert mismatch(np, outputs, answer, atol) == message


def test_nan_is_wrong_whatever_the_tolerance():
    got, expected = np.array([NAN, 1.0, np.inf]), np.array([NAN, 1.0, np.inf])
    with np.errstate(invalid="ignore"):  # inf - inf is NaN
        assert wrong(np, got, expected, np.inf).tolist() == [True, False, True]
    assert np.isnan(largest_difference(np, got[:1], expected[:1]))


def test_a_given_count_replaces_the_default_and_the_message_stays():
    calls = []

    def count_wrong(got, expected, atol):
        calls.append(atol)
        return int(np.count_nonzero(wrong(np, got, expected, atol)))

    got, expected = [np.array([1.0, 2.0])], [np.array([1.0, 3.0])]
    assert mismatch(np, got, expected, 0.5, count_wrong) == mismatch(np, got, expected, 0.5)
    assert calls == [0.5]
