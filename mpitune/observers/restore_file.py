"""The file that keeps a GPU's clock and power settings from before a run changed them.

It is written before the first change. So a run killed at any moment leaves the originals
behind. The next run on that node finds the file at start-up and puts them back
(``nvml_control.recover``). Writing is atomic and exclusive. The settings go to a temporary
file that is then hard-linked to the final name. The link fails if the name exists. So a
reader never sees half a file. And settings that are already changed never overwrite
originals saved earlier. Nothing here calls NVML.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from dataclasses import asdict, dataclass

from mpitune.errors import UserError

FORMAT = "mpitune-nvml-restore-1"


@dataclass(frozen=True)
class SavedSettings:
    """A GPU's settings before a run changed them; None for what the run does not change."""

    host: str
    pci_bus_id: str
    graphics_clock_mhz: int | None = None  # application clocks, set together
    mem_clock_mhz: int | None = None
    power_limit_mw: int | None = None


def path_for(cache_path: str, pci_bus_id: str, host: str | None = None) -> str:
    """Where the settings of one GPU of one node are kept: next to the cache file."""
    host = host or socket.gethostname()
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{host}-{pci_bus_id}")
    return f"{cache_path}.nvml-restore-{tag}.json"


def write_new(path: str, settings: SavedSettings) -> None:
    """Write the file atomically; FileExistsError if it is there already (never overwrite)."""
    directory = os.path.dirname(os.path.abspath(path))
    text = json.dumps({"format": FORMAT, **asdict(settings)}, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".nvml-restore-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    _sync_directory(directory)


def read_saved(path: str) -> SavedSettings | None:
    """The saved settings, None when there is no file.

    A file that is not a restore file raises a UserError naming it."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"observers: cannot read the saved GPU settings {path}: {exc}") from None
    fields = set(SavedSettings.__dataclass_fields__)
    if (
        not isinstance(data, dict)
        or data.pop("format", None) != FORMAT
        or not set(data) <= fields
        or not isinstance(data.get("host"), str)
        or not isinstance(data.get("pci_bus_id"), str)
        or not all(type(data.get(k)) in (int, type(None)) for k in fields - {"host", "pci_bus_id"})
    ):
        raise UserError(f"observers: {path} is not a file of saved GPU settings ({FORMAT})")
    return SavedSettings(**data)


def remove(path: str) -> None:
    """Delete the file once its settings are back in force."""
    os.unlink(path)
    _sync_directory(os.path.dirname(os.path.abspath(path)))


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
