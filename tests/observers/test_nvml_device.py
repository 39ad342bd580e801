"""Finding a GPU in NVML, and the one line a rank stops with where NVML cannot be used."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from mpitune.errors import UserError
from mpitune.observers.nvml_device import NVMLDevice, nvml_bus_id

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nvml_library_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "given, expected",
    [
        ("0000:19:00.0", "00000000:19:00.0"),  # CUDA's and CuPy's spelling
        ("00000000:1a:00.0", "00000000:1A:00.0"),  # NVML's own
        ("19:00.0", "00000000:19:00.0"),  # lspci's, without a domain
        (" 0001:9b:1f.7 ", "00000001:9B:1F.7"),
    ],
)
def test_bus_ids_are_spelled_as_nvml_spells_them(given, expected):
    assert nvml_bus_id(given) == expected


@pytest.mark.parametrize("given", ["", "GPU-0f3a", "0000:19:00", "0000:19:00.8", "0000:123:00.0"])
def test_what_is_no_bus_id_is_refused(given):
    with pytest.raises(ValueError, match=r"is not a PCI bus id such as 0000:19:00\.0"):
        nvml_bus_id(given)


@pytest.mark.skipif(_nvml_library_loads(), reason="this machine has the NVML library")
def test_without_the_nvml_library_a_rank_stops_with_one_line():
    with pytest.raises(UserError) as info:
        NVMLDevice("0000:19:00.0")
    assert str(info.value) == (
        "observers: NVML is not available: NVML Shared Library Not Found "
        "(pip install nvidia-ml-py; needs an NVIDIA driver)"
    )


def test_without_the_pynvml_package_a_rank_stops_with_one_line():
    # -S leaves site-packages, and with them pynvml, off the path: the package is really missing.
    code = (
        "from mpitune.errors import UserError\n"
        "from mpitune.observers.nvml_device import NVMLDevice\n"
        "try:\n    NVMLDevice('0000:19:00.0')\n"
        "except UserError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=dict(os.environ, PYTHONPATH=REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "observers: NVML is not available: no module pynvml (No module named 'pynvml') "
        "(pip install nvidia-ml-py; needs an NVIDIA driver)\n"
    )


def test_a_malformed_bus_id_is_a_user_error_before_nvml_is_asked():
    pytest.importorskip("pynvml")
    with pytest.raises(UserError, match=r"^observers: 'GPU 0' is not a PCI bus id"):
        NVMLDevice("GPU 0")
