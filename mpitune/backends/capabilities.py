"""What each backend supports, declared as data.

The spec loader checks a problem against these declarations (and so reports the field at fault),
and the scheduler reads where kernels run from them; no module outside ``backends/`` names a
language. A new backend adds its module and one entry in ``mpitune/backends/__init__.py``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class DeviceKind(enum.Enum):
    """Where a backend's kernels run, which decides whether compiling may go on beside them."""

    GPU = "gpu"  # compile workers on the CPU cores do not disturb the timings
    CPU = "cpu"  # timings run on the cores the compilers would take
    NONE = "none"  # nothing runs: measured data answers (replay)


@dataclass(frozen=True)
class Capabilities:
    lang: str  # the name a problem records ("C", "cupy")
    aliases: tuple[str, ...]  # what a spec's ``lang`` may say for it, compared case-insensitively
    module: str  # the module under mpitune.backends
    device: DeviceKind
    # A spec's ``lang`` may name it; False for backends the tool selects itself (replay).
    selectable: bool = True
    # The kernel's name: what it must match, and how to say so when it does not.
    kernel_name: re.Pattern[str] = re.compile(r"^[A-Za-z_]\w*$")
    kernel_name_rule: str = "a C identifier"
    # Device memory the spec may fill, by the spec's field names.
    memory_kinds: frozenset[str] = frozenset()
    # Scalar arguments passed by value: the numpy dtypes allowed (None: any numeric dtype).
    scalar_dtypes: frozenset[str] | None = None
    # The widest float and complex element types, in bytes (numpy has wider ones than C/CUDA).
    max_float_bytes: int = 16
    max_complex_bytes: int = 32
    # Whether an expected answer may be complex (a GPU check compares real values only).
    complex_answers: bool = True
    # Whether the kernel is launched on a grid of blocks: block sizes and grid_div apply.
    launch_geometry: bool = False
    # Observers it can run, by class name in mpitune.observers, and the tunable parameters
    # that set its device (clocks, power limit) rather than the kernel.
    observers: tuple[str, ...] = ()
    device_tunables: tuple[str, ...] = ()
    # Measure in a supervised child process with a deadline (see mpitune/process/isolation.py);
    # a backend that runs nothing needs no guard.
    isolate: bool = True
    # Its time is the measured time of a real run it stands for: the clock is simulated.
    simulated_clock: bool = False

    def names(self) -> tuple[str, ...]:
        return (self.lang.lower(), *self.aliases)
