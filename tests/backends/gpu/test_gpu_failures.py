"""What a failed launch is called, on any GPU platform: pure, so checked without a GPU."""

from __future__ import annotations

import pytest

from mpitune.backends.gpu.failures import KernelLimits, context_lost, launch_limits, library_text, select_device


class Sticky(Exception):
    """An error that poisons the context, as a platform raises it."""


def test_device_is_local_rank_modulo_visible_gpus():
    assert [select_device(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    assert select_device(3, 1) == 0
    with pytest.raises(ValueError):
        select_device(0, 0)


def test_launch_errors_name_the_geometry_and_the_kernels_limits():
    assert launch_limits((4, 1, 1), (2048, 1, 1), 0, None) == "grid (4, 1, 1), block (2048, 1, 1) = 2048 threads"
    assert launch_limits((4, 1, 1), (32, 32, 1), 1 << 20, KernelLimits(896, 72, 0)) == (
        "grid (4, 1, 1), block (32, 32, 1) = 1024 threads; this kernel allows at most 896 threads per block "
        "with 72 registers per thread and 0 bytes of static shared memory and 1048576 of dynamic"
    )


def test_a_lost_context_says_where_and_what_follows():
    message = context_lost("GPU 1 (NVIDIA H200)", "the verify run", Sticky("an illegal memory access"))
    assert message.startswith("GPU 1 (NVIDIA H200) failed during the verify run: Sticky: an illegal memory access. ")
    assert "recorded as runtime_error and a rerun resumes after it" in message

    assert "poisons the CUDA context" in message
    assert "poisons the HIP context" in context_lost("GPU 0", "the verify run", Sticky("trap"), "HIP")


def test_a_librarys_text_loses_its_padding():
    assert library_text(b"NVIDIA H200\x00\x00") == "NVIDIA H200" and library_text(ValueError("odd")) == "odd"
