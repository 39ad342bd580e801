"""Setting clocks and the power limit: refusals, recovery at start-up, and permission.

The GPU machine these tests run on is shared: its clocks and power limit must never change.
No test calls an NVML setter with root's rights. The permission test runs the setting path
in a child that has given up root first, and asks for the values already in force, so that
nothing would change even if it were allowed.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mpitune.errors import UserError
from mpitune.observers import restore_file
from mpitune.observers.nvml_control import ClockControl, recover
from mpitune.observers.nvml_device import nvml_bus_id
from mpitune.observers.restore_file import SavedSettings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = 65534


def _nvml_library_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------------
# Without a GPU
# ------------------------------------------------------------------------------------


def test_recovery_without_a_file_has_nothing_to_do(tmp_path: Path):
    assert recover(str(tmp_path / "absent.json")) is False


def test_recovery_leaves_another_nodes_file_alone(tmp_path: Path, caplog):
    path = str(tmp_path / "r.json")
    saved = SavedSettings(
        host=socket.gethostname() + "-elsewhere", pci_bus_id="00000000:19:00.0", power_limit_mw=500000
    )
    restore_file.write_new(path, saved)
    with caplog.at_level(logging.WARNING):
        assert recover(path) is False
    assert restore_file.read_saved(path) == saved
    assert any("not on this node; left as it is" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(_nvml_library_loads(), reason="this machine has the NVML library")
def test_recovery_without_nvml_stops_and_keeps_the_file_for_a_later_run(tmp_path: Path):
    path = str(tmp_path / "r.json")
    saved = SavedSettings(host=socket.gethostname(), pci_bus_id="00000000:19:00.0", power_limit_mw=500000)
    restore_file.write_new(path, saved)
    with pytest.raises(UserError, match=r"^observers: NVML is not available: NVML Shared Library Not Found"):
        recover(path)
    assert restore_file.read_saved(path) == saved


def test_a_control_needs_a_parameter_that_sets_the_gpu(tmp_path: Path):
    with pytest.raises(ValueError, match="one of nvml_gr_clock, nvml_mem_clock, nvml_pwr_limit"):
        ClockControl("0000:19:00.0", {"block_size_x": [32]}, str(tmp_path / "r.json"))


# ------------------------------------------------------------------------------------
# On a GPU (read-only as root)
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu(cp):
    """GPU 0's bus id and its settings in force, read through NVML."""
    import pynvml

    bus = cp.cuda.Device(0).pci_bus_id
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        yield {"bus": bus, "handle": handle, "nvml": pynvml, "settings": lambda: _settings(pynvml, handle)}
    finally:
        pynvml.nvmlShutdown()


def _settings(pynvml, handle) -> tuple[int, int, int]:
    return (
        pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_GRAPHICS),
        pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_MEM),
        pynvml.nvmlDeviceGetPowerManagementLimit(handle),
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tune_params, message",
    [
        ({"nvml_mem_clock": [1]}, "nvml_mem_clock value 1 MHz is not a memory clock of GPU"),
        ({"nvml_gr_clock": [3]}, "nvml_gr_clock value 3 MHz is not a graphics clock of GPU"),
        ({"nvml_pwr_limit": [100000]}, "nvml_pwr_limit value 100000 W is outside the range"),
    ],
)
def test_values_the_gpu_cannot_take_are_refused_when_the_control_is_made(gpu, tmp_path, tune_params, message):
    before = gpu["settings"]()
    with pytest.raises(UserError, match=f"^observers: {message}"):
        ClockControl(gpu["bus"], tune_params, str(tmp_path / "r.json"))
    assert gpu["settings"]() == before
    assert not (tmp_path / "r.json").exists()


CHILD = r"""
import json, os, sys
import pynvml  # imported while the files are still readable; NVML is initialised after the drop
from mpitune.errors import UserError
from mpitune.observers.nvml_control import ClockControl

bus, directory, cases, uid = json.loads(sys.argv[1])
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
if os.geteuid() == 0:
    sys.exit("still root")
outcome = {}
for name, tune_params, config in cases:
    path = os.path.join(directory, name + ".json")
    control = ClockControl(bus, tune_params, path)
    try:
        control.apply(config)
        outcome[name] = ["applied", os.path.exists(path)]
    except UserError as exc:
        outcome[name] = [str(exc), os.path.exists(path)]
    finally:
        control.close()
print(json.dumps(outcome))
"""


@pytest.mark.gpu
def test_without_root_setting_is_refused_with_one_line_and_nothing_changes(gpu):
    nvml, handle, bus = gpu["nvml"], gpu["handle"], gpu["bus"]
    before = gpu["settings"]()
    gr, mem, power_mw = before
    cases = [["power", {"nvml_pwr_limit": [power_mw / 1e3]}, {"nvml_pwr_limit": power_mw / 1e3}]]
    try:
        restricted = nvml.nvmlDeviceGetAPIRestriction(handle, nvml.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS)
    except nvml.NVMLError_NotSupported:
        restricted = None  # a GPU without application clocks (the H100 and H200): the power limit alone
    if restricted is not None:
        if restricted != nvml.NVML_FEATURE_ENABLED:
            pytest.fail(
                f"application clocks of GPU {bus} may be set without root (nvidia-smi -acp "
                f"UNRESTRICTED): an unprivileged process could change them, so this test does not try"
            )
        cases.append(
            ["clocks", {"nvml_gr_clock": [gr], "nvml_mem_clock": [mem]}, {"nvml_gr_clock": gr, "nvml_mem_clock": mem}]
        )
    directory = tempfile.mkdtemp(prefix="mpitune-nvml-")
    try:
        if os.geteuid() == 0:
            os.chown(directory, NOBODY, NOBODY)
        env = dict(os.environ, PYTHONPATH=REPO, HOME=directory, TMPDIR=directory)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps([bus, directory, cases, NOBODY])],
            env=env,
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        outcome = json.loads(out.stdout)
        assert os.listdir(directory) == []
    finally:
        shutil.rmtree(directory)
    assert gpu["settings"]() == before
    nvml_bus = nvml_bus_id(bus)
    expected = {
        "clocks": [
            f"observers: setting application clocks (nvml_gr_clock, nvml_mem_clock) on GPU {nvml_bus} "
            f"needs root, or an administrator's nvidia-smi -i {nvml_bus} -acp UNRESTRICTED",
            False,
        ],
        "power": [f"observers: setting the power limit (nvml_pwr_limit) on GPU {nvml_bus} needs root", False],
    }  # False: no restore file is left behind
    assert outcome == {name: expected[name] for name, _, _ in cases}
