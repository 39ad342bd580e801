"""NVMLObserver: what a spec writes. Checked and pickled without pynvml, a driver or a GPU."""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
import sys

import pytest

from mpitune.observers import NVMLObserver
from mpitune.observers.nvml import energy_per_launch_j

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL = {
    "power_w": "nvml_power",
    "energy_j": "nvml_energy",
    "sm_clock_mhz": "core_freq",
    "mem_clock_mhz": "mem_freq",
    "temperature_c": "temperature",
}


def test_without_observables_all_five_are_recorded_with_their_kernel_tuner_names():
    assert NVMLObserver().value_names() == ALL


def test_observables_keep_the_spec_order_and_lose_repeats():
    observer = NVMLObserver(["temperature", "nvml_energy", "temperature"])
    assert observer.value_names() == {"temperature_c": "temperature", "energy_j": "nvml_energy"}
    assert list(observer.value_names()) == ["temperature_c", "energy_j"]


@pytest.mark.parametrize(
    "observables, message",
    [
        (["nvml_enrgy"], "unknown observable 'nvml_enrgy'; supported: nvml_power, nvml_energy, core_freq"),
        (["power_readings"], "'power_readings' is not supported: it is a variable-length series"),
        (["gr_voltage"], "'gr_voltage' is not supported: Kernel Tuner reads it by running nvidia-smi"),
        ("nvml_energy", "observables must be a list of names"),
        ([42], "observables must be a list of names"),
    ],
)
def test_a_bad_observable_is_named(observables, message):
    with pytest.raises(ValueError, match=r"^NVMLObserver: ") as info:
        NVMLObserver(observables)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("duration", [0, -1.0, math.inf, math.nan, "1", True, None])
def test_continuous_duration_must_be_a_positive_number_of_seconds(duration):
    with pytest.raises(ValueError, match="continuous_duration must be a positive number of seconds"):
        NVMLObserver(["nvml_power"], continuous_duration=duration)


def test_kernel_tuner_arguments_without_meaning_here_are_accepted(caplog):
    with caplog.at_level(logging.WARNING):
        observer = NVMLObserver(["nvml_power"], device=3, save_all=True, continuous_duration=2)
    assert observer.continuous_duration == 2.0
    assert caplog.records == []  # device and save_all change nothing a user would notice


def test_use_locked_clocks_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        NVMLObserver(["nvml_power"], use_locked_clocks=True, nvidia_smi_fallback="/usr/bin/nvidia-smi")
    assert any("no effect in mpitune" in r.getMessage() for r in caplog.records)


def test_a_pickled_observer_is_the_same_in_a_fresh_interpreter_without_loading_pynvml():
    observer = NVMLObserver(["core_freq", "nvml_energy"], continuous_duration=0.25)
    code = (
        "import pickle, sys; o = pickle.load(sys.stdin.buffer); "
        "print(o.value_names(), o.continuous_duration, 'pynvml' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(observer), env=env, capture_output=True, timeout=60
    )
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split("\n")[0] == "{'sm_clock_mhz': 'core_freq', 'energy_j': 'nvml_energy'} 0.25 False"


def test_the_window_is_filled_by_enough_launches():
    observer = NVMLObserver(continuous_duration=1.0)
    assert observer.launches(0.3) == 3334  # ceil(1000 ms / 0.3 ms)
    assert observer.launches(250.0) == 4
    assert observer.launches(5000.0) == 1  # a kernel longer than the window still runs once
    with pytest.raises(ValueError, match="kernel time must be positive"):
        observer.launches(0.0)


def test_values_are_those_asked_for_with_energy_per_kernel_execution():
    window = {
        "power_w": 400.0,
        "energy_j": 412.0,
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 3201.0,
        "temperature_c": 61.0,
        "window_s": 1.03,
        "samples": 190.0,
    }
    observer = NVMLObserver(["nvml_energy", "nvml_power"])
    assert observer.values(window, launches=1000) == {"energy_j": 0.412, "power_w": 400.0}
    assert window["energy_j"] == 412.0  # the sampler's window is left as it was


def test_energy_per_launch_needs_a_launch():
    assert energy_per_launch_j(10.0, 4) == 2.5
    with pytest.raises(ValueError, match="at least one launch"):
        energy_per_launch_j(10.0, 0)
