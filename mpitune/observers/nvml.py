"""What a spec asks NVML to record, in Kernel Tuner's words, and how a window becomes values.

``NVMLObserver`` is what a spec writes, as for Kernel Tuner::

    from mpitune.observers import NVMLObserver
    observers = [NVMLObserver(["nvml_energy", "temperature"])]

It only describes the measurement and holds no NVML handle. So it pickles and travels to the
worker processes. Creating it needs neither pynvml nor a GPU. The backend measures with
``nvml_sampler.PowerSampler``. ``NVMLObserver.values`` turns the window it returns into a
configuration's values. See docs/cupy-backend.md, "Power, energy and clocks".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)

# Kernel Tuner's observable -> the value mpitune records, with its unit in the name.
RECORDED = {
    "nvml_power": "power_w",  # mean power of the GPU over the window
    "nvml_energy": "energy_j",  # energy of one kernel execution
    "core_freq": "sm_clock_mhz",  # mean SM clock over the window
    "mem_freq": "mem_clock_mhz",  # mean memory clock over the window
    "temperature": "temperature_c",  # highest GPU temperature in the window
}
# Kernel Tuner observables mpitune refuses, and why.
REFUSED = {
    "power_readings": "it is a variable-length series per configuration; mpitune records "
    "one value per configuration and observable",
    "gr_voltage": "Kernel Tuner reads it by running nvidia-smi during the benchmark",
}
# Tunable parameters that set the GPU instead of the kernel (see nvml_control.py).
TUNABLES = ("nvml_gr_clock", "nvml_mem_clock", "nvml_pwr_limit")


class NVMLObserver:
    """Power, energy, clocks and temperature per configuration, measured with NVML.

    ``observables`` takes Kernel Tuner's names (all five when None). The backend runs the
    kernel back to back for at least ``continuous_duration`` seconds while NVML is sampled.
    NVML refreshes its power and energy readings far less often than a kernel runs. Only a
    window of about a second holds enough of them.

    Kernel Tuner's other arguments are accepted, so that its specs load, and ignored:

    - ``device``: every rank measures its own GPU, which the backend names by PCI bus id. One
      fixed NVML index would be the wrong GPU on all ranks but one.
    - ``save_all``: the cache keeps one value per configuration and observable.
    - ``nvidia_smi_fallback``: mpitune never runs ``sudo nvidia-smi``. Without the permission
      to set clocks, the run stops with an error instead.
    - ``use_locked_clocks``: ``nvml_gr_clock`` and ``nvml_mem_clock`` set application clocks.
    """

    def __init__(
        self,
        observables: Sequence[str] | None = None,
        device: int | None = None,
        save_all: bool = False,
        nvidia_smi_fallback: str | None = None,
        use_locked_clocks: bool = False,
        continuous_duration: float = 1.0,
    ):
        names = list(RECORDED) if observables is None else observables
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"NVMLObserver: observables must be a list of names, got {names!r}")
        for name in names:
            if name in REFUSED:
                raise ValueError(f"NVMLObserver: observable {name!r} is not supported: {REFUSED[name]}")
            if name not in RECORDED:
                raise ValueError(f"NVMLObserver: unknown observable {name!r}; supported: {', '.join(RECORDED)}")
        if (
            isinstance(continuous_duration, bool)
            or not isinstance(continuous_duration, (int, float))
            or not 0 < continuous_duration < math.inf
        ):
            raise ValueError(
                f"NVMLObserver: continuous_duration must be a positive number of seconds, got {continuous_duration!r}"
            )
        if use_locked_clocks or nvidia_smi_fallback:
            log.warning(
                "NVMLObserver: use_locked_clocks and nvidia_smi_fallback have no effect in "
                "mpitune: clocks are set as application clocks, and only with permission"
            )
        self.observables = list(dict.fromkeys(names))
        self.continuous_duration = float(continuous_duration)

    def __repr__(self) -> str:
        return f"NVMLObserver({self.observables!r}, continuous_duration={self.continuous_duration!r})"

    def value_names(self) -> dict[str, str]:
        """The values recorded per configuration, with the Kernel Tuner name of each.

        For example ``{"energy_j": "nvml_energy", ...}``. A metric ported from Kernel Tuner reads
        ``p["nvml_energy"]``. Results and reports use ``energy_j``."""
        return {RECORDED[name]: name for name in self.observables}

    def launches(self, kernel_time_ms: float) -> int:
        """How many back-to-back launches fill the window, from the kernel's median time."""
        if not kernel_time_ms > 0:
            raise ValueError(f"kernel time must be positive, got {kernel_time_ms!r} ms")
        return max(1, math.ceil(self.continuous_duration * 1e3 / kernel_time_ms))

    def values(self, window: Mapping[str, float], launches: int) -> dict[str, float]:
        """This observer's values for one configuration, from a sampler window.

        The window holds ``launches`` kernel executions. Energy becomes energy per execution,
        as Kernel Tuner's nvml_energy is."""
        window = dict(window, energy_j=energy_per_launch_j(window["energy_j"], launches))
        return {name: float(window[name]) for name in self.value_names()}


def energy_per_launch_j(window_energy_j: float, launches: int) -> float:
    """Energy of one kernel execution: the window's energy shared by the launches in it."""
    if launches < 1:
        raise ValueError(f"a window needs at least one launch, got {launches}")
    return window_energy_j / launches
