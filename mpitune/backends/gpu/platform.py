"""The hooks a GPU platform implements for ``GpuBackend``: its device, memory, streams and launches.

Each is small: a platform's library does the work. ``GpuBackend`` (backend.py) does the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from mpitune.backends.base import Compiled, Compiler
from mpitune.backends.gpu.failures import Failure, KernelLimits
from mpitune.backends.gpu.loading import Loaded


class Stream(Protocol):
    """A queue of work on the GPU; ``with stream:`` makes it the current one."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def synchronize(self) -> None: ...


class Event(Protocol):
    """A mark on a stream, for timing the work between two of them."""

    def record(self, stream: Any) -> None: ...

    def synchronize(self) -> None: ...


class Check(Protocol):
    """The answers on the GPU, and the comparison of outputs with them."""

    def warm_up(self, outputs: Sequence[Any]) -> None: ...

    def mismatch(self, outputs: Sequence[Any]) -> str: ...


@dataclass(frozen=True)
class DeviceFacts:
    """What the record says of the GPU: its model, UUID and PCI bus id ('' where unknown)."""

    name: str
    uuid: str
    pci_bus_id: str


class Platform(ABC):
    """The hooks; each is called with the device in use and, after ``prepare``, the stream made."""

    @abstractmethod
    def _device_count(self) -> int:
        """How many GPUs this process sees; raises where the driver cannot say."""

    @abstractmethod
    def _use_device(self, device_id: int) -> None:
        """Make ``device_id`` this process' GPU, its context current."""

    @abstractmethod
    def _device_facts(self) -> DeviceFacts:
        """The model, UUID and PCI bus id of ``self.device_id``."""

    @abstractmethod
    def _make_compiler(self, local_rank: int) -> Compiler:
        """What compiles one configuration in any process, behind the kernel cache."""

    @abstractmethod
    def _new_stream(self) -> Stream:
        """A stream of the backend's own, not the device's default one."""

    @abstractmethod
    def _new_event(self) -> Event:
        """An event that can time the work between two records."""

    @abstractmethod
    def _elapsed_ms(self, start: Event, end: Event) -> float:
        """Milliseconds between two recorded events; ``end`` is complete."""

    @abstractmethod
    def _upload(self, array: np.ndarray) -> Any:
        """A copy of a host array on the GPU, on the current stream."""

    @abstractmethod
    def _empty_like(self, device_array: Any) -> Any:
        """A new GPU array of the same shape and type."""

    @abstractmethod
    def _to_host(self, device_array: Any) -> np.ndarray:
        """A host copy of a GPU array."""

    @abstractmethod
    def _reset(self, dst: Any, src: Any) -> None:
        """Copy ``src`` into ``dst`` on the GPU, queued on the backend's stream."""

    @abstractmethod
    def _make_check(self, answers: list | None) -> Check:
        """The comparison of outputs with the uploaded answers (None: nothing to compare)."""

    def _after_upload(self) -> None:  # noqa: B027 (a hook: most platforms upload nothing more)
        """What the platform uploads beside the problem's data, on the current stream."""

    @abstractmethod
    def _load_kernel(self, compiled: Compiled) -> Any:
        """Load the compiled module and fill its constant memory (``self._constants``).

        Returns:
            The kernel, which holds its module loaded. Raises what the driver raised.
        """

    @abstractmethod
    def _grant_shared_memory(self, loaded: Loaded) -> None:
        """Ask for the dynamic shared memory of ``loaded`` where the default is too small."""

    @abstractmethod
    def _launch(self, loaded: Loaded) -> None:
        """Queue one launch on ``self._args``, on the backend's stream."""

    @abstractmethod
    def _classify(self, exc: BaseException) -> Failure:
        """What an exception raised by a launch means."""

    @abstractmethod
    def _is_sticky(self, exc: BaseException) -> bool:
        """Whether the error lost the context, from the error alone."""

    @abstractmethod
    def _kernel_limits(self, kernel: Any) -> KernelLimits | None:
        """What the driver says the kernel allows; None when it does not say."""

    @abstractmethod
    def _out_of_memory(self) -> type[Exception]:
        """The exception the platform raises when the GPU's memory is full."""

    @abstractmethod
    def _free_memory(self) -> None:
        """Give back what the platform holds once the references are gone; never raises."""
