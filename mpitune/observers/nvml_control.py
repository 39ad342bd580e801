"""Sets a GPU's application clocks and power limit from tunable parameters, and puts them back.

The tunable parameters have Kernel Tuner's names. ``nvml_gr_clock`` and ``nvml_mem_clock``
are application clocks in MHz, set together. ``nvml_pwr_limit`` is the power limit in W.
Setting them needs permission. The power limit needs root. Application clocks need root unless
an administrator ran ``nvidia-smi -acp UNRESTRICTED``. A run without permission stops at its
first configuration, before anything is measured. One line says what is missing. It must not
go on measuring at clocks that are not the ones its results claim.

The settings in force before the first change are first saved to a restore file
(restore_file.py). ``close()`` puts them back and deletes it. A run that dies before that
leaves the file. The next run calls ``recover()`` at start-up.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence

from mpitune.errors import UserError
from mpitune.observers import restore_file
from mpitune.observers.nvml import TUNABLES
from mpitune.observers.nvml_device import NVMLDevice
from mpitune.observers.restore_file import SavedSettings

log = logging.getLogger(__name__)

CLOCKS = "application clocks (nvml_gr_clock, nvml_mem_clock)"
POWER = "the power limit (nvml_pwr_limit)"
PERMISSION = {
    CLOCKS: "needs root, or an administrator's nvidia-smi -i {bus} -acp UNRESTRICTED",
    POWER: "needs root",
}


class ClockControl:
    """Application clocks and power limit of the GPU at ``pci_bus_id``, as configurations ask.

    ``tune_params`` are the spec's. Creating the control checks all values of the ``nvml_*``
    parameters against what the GPU supports. ``restore_path`` is where the original settings
    are saved (``restore_file.path_for``).
    """

    def __init__(self, pci_bus_id: str, tune_params: Mapping[str, Sequence], restore_path: str):
        self.tune_clocks = "nvml_gr_clock" in tune_params or "nvml_mem_clock" in tune_params
        self.tune_power = "nvml_pwr_limit" in tune_params
        if not (self.tune_clocks or self.tune_power):
            raise ValueError(f"no tunable parameter sets the GPU (one of {', '.join(TUNABLES)})")
        self.restore_path = restore_path
        self.device = NVMLDevice(pci_bus_id)
        self.bus = self.device.bus_id
        self._saved: SavedSettings | None = None
        try:
            if self.tune_clocks:
                self._read_supported_clocks()
            if self.tune_power:
                low, high = _call(self.device, POWER, self.device.nvml.nvmlDeviceGetPowerManagementLimitConstraints)
                self.power_range_w = (low / 1e3, high / 1e3)
            self._check_values(tune_params)
        except BaseException:
            self.device.close()
            raise

    def _read_supported_clocks(self) -> None:
        nvml = self.device.nvml
        mem_clocks = _call(self.device, CLOCKS, nvml.nvmlDeviceGetSupportedMemoryClocks)
        self.supported = {
            int(m): {int(g) for g in _call(self.device, CLOCKS, nvml.nvmlDeviceGetSupportedGraphicsClocks, m)}
            for m in mem_clocks
        }

    def _check_values(self, tune_params: Mapping[str, Sequence]) -> None:
        """Refuse values the GPU cannot take, before anything is set or measured."""
        if self.tune_power:
            low, high = self.power_range_w
            for w in tune_params["nvml_pwr_limit"]:
                if isinstance(w, bool) or not isinstance(w, (int, float)) or not low <= w <= high:
                    raise UserError(
                        f"observers: nvml_pwr_limit value {w!r} W is outside the range "
                        f"{low:g}-{high:g} W of GPU {self.bus}"
                    )
        if not self.tune_clocks:
            return
        mem_values = tune_params.get("nvml_mem_clock", [])
        for m in mem_values:
            if m not in self.supported:
                raise UserError(
                    f"observers: nvml_mem_clock value {m!r} MHz is not a memory clock of "
                    f"GPU {self.bus}; supported: {_listed(self.supported)}"
                )
        mem_values = mem_values or [self._applications_clocks()[1]]
        usable = set().union(*(self.supported[m] for m in mem_values))
        for g in tune_params.get("nvml_gr_clock", []):
            if g not in usable:
                raise UserError(
                    f"observers: nvml_gr_clock value {g!r} MHz is not a graphics clock of "
                    f"GPU {self.bus} with memory clock {_listed(mem_values)} MHz; "
                    f"supported: {_listed(usable)}"
                )

    def _applications_clocks(self) -> tuple[int, int]:
        """(graphics, memory) application clocks in force, MHz."""
        nvml = self.device.nvml
        return (
            int(_call(self.device, CLOCKS, nvml.nvmlDeviceGetApplicationsClock, nvml.NVML_CLOCK_GRAPHICS)),
            int(_call(self.device, CLOCKS, nvml.nvmlDeviceGetApplicationsClock, nvml.NVML_CLOCK_MEM)),
        )

    def _power_limit_mw(self) -> int:
        return int(_call(self.device, POWER, self.device.nvml.nvmlDeviceGetPowerManagementLimit))

    def apply(self, config: Mapping) -> None:
        """Set what ``config`` asks for where it differs from what is in force.

        The first call saves the original settings and then sets them again unchanged. That asks
        NVML for permission without changing anything. Without permission it raises the
        UserError and leaves no restore file.
        """
        saved = self._saved or self._save_and_probe()
        if self.tune_clocks:
            mem = int(config.get("nvml_mem_clock", saved.mem_clock_mhz))
            gr = int(config.get("nvml_gr_clock", saved.graphics_clock_mhz))
            if gr not in self.supported.get(mem, ()):
                raise UserError(
                    f"observers: GPU {self.bus} has no graphics clock {gr} MHz with memory "
                    f"clock {mem} MHz; leave the pair out with a restriction"
                )
            if self._applications_clocks() != (gr, mem):
                _call(self.device, CLOCKS, self.device.nvml.nvmlDeviceSetApplicationsClocks, mem, gr)
        if self.tune_power:
            assert saved.power_limit_mw is not None, "saved whenever the power limit is tuned"
            mw = round(float(config.get("nvml_pwr_limit", saved.power_limit_mw / 1e3)) * 1e3)
            if self._power_limit_mw() != mw:
                _call(self.device, POWER, self.device.nvml.nvmlDeviceSetPowerManagementLimit, mw)

    def _save_and_probe(self) -> SavedSettings:
        gr, mem = self._applications_clocks() if self.tune_clocks else (None, None)
        saved = SavedSettings(
            host=socket.gethostname(),
            pci_bus_id=self.bus,
            graphics_clock_mhz=gr,
            mem_clock_mhz=mem,
            power_limit_mw=self._power_limit_mw() if self.tune_power else None,
        )
        try:
            restore_file.write_new(self.restore_path, saved)
        except FileExistsError:
            raise UserError(
                f"observers: {self.restore_path} already holds saved settings of GPU "
                f"{self.bus}: another process on this node sets this GPU, or a run that "
                f"crashed left it and start-up recovery did not run"
            ) from None
        try:
            if self.tune_clocks:
                _call(self.device, CLOCKS, self.device.nvml.nvmlDeviceSetApplicationsClocks, mem, gr)
            if self.tune_power:
                _call(self.device, POWER, self.device.nvml.nvmlDeviceSetPowerManagementLimit, saved.power_limit_mw)
        except UserError:
            restore_file.remove(self.restore_path)  # what was set is what was there
            raise
        self._saved = saved
        log.info("GPU %s: original clock and power settings saved to %s", self.bus, self.restore_path)
        return saved

    def restore(self) -> None:
        """Put the original settings back and delete the restore file (nothing if none were saved)."""
        if self._saved is None:
            return
        put_back(self.device, self._saved)
        restore_file.remove(self.restore_path)
        self._saved = None
        log.info("GPU %s: original clock and power settings restored", self.bus)

    def close(self) -> None:
        """Restore, then end the NVML session."""
        try:
            self.restore()
        finally:
            self.device.close()


def put_back(device: NVMLDevice, saved: SavedSettings) -> None:
    """Set the saved settings where they differ from what is in force.

    Application clocks that were the defaults are reset rather than set. So the GPU is left as
    it was before any run."""
    nvml = device.nvml
    if saved.graphics_clock_mhz is not None:
        wanted = (saved.graphics_clock_mhz, saved.mem_clock_mhz)
        now = tuple(
            int(_call(device, CLOCKS, nvml.nvmlDeviceGetApplicationsClock, clock))
            for clock in (nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_MEM)
        )
        if now != wanted:
            defaults = tuple(
                int(_call(device, CLOCKS, nvml.nvmlDeviceGetDefaultApplicationsClock, clock))
                for clock in (nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_MEM)
            )
            if wanted == defaults:
                _call(device, CLOCKS, nvml.nvmlDeviceResetApplicationsClocks)
            else:
                _call(
                    device, CLOCKS, nvml.nvmlDeviceSetApplicationsClocks, saved.mem_clock_mhz, saved.graphics_clock_mhz
                )
    if (
        saved.power_limit_mw is not None
        and int(_call(device, POWER, nvml.nvmlDeviceGetPowerManagementLimit)) != saved.power_limit_mw
    ):
        _call(device, POWER, nvml.nvmlDeviceSetPowerManagementLimit, saved.power_limit_mw)


def recover(restore_path: str) -> bool:
    """At start-up: put back the settings a run that died left in ``restore_path``.

    True when it restored something. A file written on another node is left alone, with a
    warning. Its GPU is not this node's.
    """
    saved = restore_file.read_saved(restore_path)
    if saved is None:
        return False
    if saved.host != socket.gethostname():
        log.warning(
            "observers: %s holds GPU settings saved on %s, not on this node; left as it is", restore_path, saved.host
        )
        return False
    device = NVMLDevice(saved.pci_bus_id)
    try:
        put_back(device, saved)
    finally:
        device.close()
    restore_file.remove(restore_path)
    log.warning(
        "observers: GPU %s: put back the clock and power settings saved in %s by a run "
        "that ended without restoring them",
        saved.pci_bus_id,
        restore_path,
    )
    return True


def _call(device: NVMLDevice, what: str, fn, *args):
    """One NVML call about ``what``, its errors as one line a user can act on."""
    nvml = device.nvml
    try:
        return fn(device.handle, *args)
    except nvml.NVMLError_NoPermission:
        raise UserError(
            f"observers: setting {what} on GPU {device.bus_id} {PERMISSION[what].format(bus=device.bus_id)}"
        ) from None
    except nvml.NVMLError_NotSupported:
        raise UserError(f"observers: GPU {device.bus_id} does not support setting {what}") from None
    except nvml.NVMLError as exc:
        raise UserError(f"observers: {fn.__name__} on GPU {device.bus_id} failed: {exc}") from None


def _listed(values) -> str:
    return ", ".join(str(v) for v in sorted(values, reverse=True))
