"""mpitune.run_kernel for real: gcc-compiled C kernels, run once in this process."""

from __future__ import annotations

import numpy as np
import pytest

from mpitune import run_kernel
from mpitune.errors import SpecError

AXPY_C = r"""
/* y += a * x, UNROLL elements per step; BROKEN does not compile. */
#ifdef BROKEN
#error "a configuration that does not compile"
#endif
void axpy(float *y, const float *x, float a, int n)
{
    int i = 0;
    for (; i + UNROLL <= n; i += UNROLL)
        for (int u = 0; u < UNROLL; u++)
            y[i + u] += a * x[i + u];
    for (; i < n; i++)
        y[i] += a * x[i];
}
"""


def axpy_args(n: int = 1000):
    rng = np.random.default_rng(3)
    return [rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32), np.float32(2.5), np.int32(n)]


@pytest.mark.parametrize("unroll", [1, 3, 8])
def test_the_outputs_are_numpys_answer_after_one_run(unroll):
    """y += a * x accumulates: the output is that of exactly one launch, not of the timed runs."""
    args = axpy_args()
    y, x = args[0].copy(), args[1].copy()
    out = run_kernel("axpy", AXPY_C, 1000, args, {"UNROLL": unroll}, lang="C")
    assert len(out) == 4 and isinstance(out[0], np.ndarray)
    np.testing.assert_array_equal(out[0], y + np.float32(2.5) * x)
    np.testing.assert_array_equal(out[1], x)
    assert out[2] == np.float32(2.5) and out[3] == np.int32(1000)
    np.testing.assert_array_equal(args[0], y)  # the caller's arrays are left as they were


def test_defines_functions_set_what_the_kernel_sees():
    out = run_kernel(
        "axpy", AXPY_C, 1000, axpy_args(), {"step": 2}, lang="C", defines={"UNROLL": lambda p: p["step"] * 2}
    )
    args = axpy_args()
    np.testing.assert_array_equal(out[0], args[0] + np.float32(2.5) * args[1])


def test_a_configuration_that_fails_raises_with_the_compilers_message():
    with pytest.raises(RuntimeError, match=r"compile_error.*a configuration that does not compile"):
        run_kernel("axpy", AXPY_C, 1000, axpy_args(), {"UNROLL": 1, "BROKEN": 1}, lang="C")


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"answer": [None] * 4}, "run_kernel: answer: unknown keyword argument of run_kernel"),
        ({"lang": "fortran"}, "run_kernel: lang: "),
        ({"texmem_args": {}}, "run_kernel: texmem_args: is a Kernel Tuner argument that mpitune does not support"),
    ],
)
def test_a_bad_argument_is_one_error_naming_it(keywords, message):
    with pytest.raises(SpecError) as error:
        run_kernel("axpy", AXPY_C, 1000, axpy_args(), {"UNROLL": 1}, **{"lang": "C", **keywords})
    assert str(error.value).startswith(message)
