"""Compiled configurations made launchable, the same way for ``run`` and ``retime``.

The backend's hook loads the module; the loader adds the launch geometry. A candidate is
thus timed again exactly as the search launched it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpitune.backends.base import Compiled, shorten
from mpitune.backends.gpu.failures import describe
from mpitune.backends.gpu.geometry import Dims, Geometry
from mpitune.model.work import Work

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """One configuration ready to launch: its kernel, which holds its module, and its geometry."""

    work: Work
    kernel: Any
    grid: Dims
    block: Dims
    smem_bytes: int  # dynamic shared memory of each launch


class Loader:
    """Loads kernels and places them on their grid.

    Args:
        geometry: the problem's launch rules.
        load_kernel: the backend's hook; raises what the driver raised.
        is_sticky: whether such an error lost the context.
        lose_context: marks the backend lost; returns its fatal error.
    """

    def __init__(
        self,
        geometry: Geometry,
        load_kernel: Callable[[Compiled], Any],
        is_sticky: Callable[[BaseException], bool],
        lose_context: Callable[[BaseException, str], str],
    ):
        self.geometry = geometry
        self._load_kernel = load_kernel
        self._is_sticky = is_sticky
        self._lose_context = lose_context

    def kernel(self, compiled: Compiled) -> tuple[Any, str]:
        """(kernel, '') or (None, why): the loader's complaint, or the lost context.

        A PTX image the driver cannot fit, or a missing symbol, is such a complaint.
        """
        try:
            return self._load_kernel(compiled), ""
        except Exception as exc:
            if self._is_sticky(exc):
                return None, self._lose_context(exc, "loading the module")
            return None, shorten(describe(exc))

    def placed(self, work: Work, kernel: Any) -> Loaded:
        """The kernel with its grid, block and dynamic shared memory.

        Raises where the geometry cannot be computed; that never happens for a compiled one.
        """
        grid, block = self.geometry.dims(work.config)
        return Loaded(work, kernel, grid, block, work.derived.smem_bytes if work.derived else 0)

    def candidate(self, work: Work, compiled: Compiled, lost: str) -> Loaded | None:
        """A candidate to time again, or None (with a warning) where it cannot be loaded.

        Args:
            work: the candidate.
            compiled: what its compile made.
            lost: the backend's fatal error; '' while its context is good.

        Returns:
            The loaded candidate; None when it failed to compile or load, or the context is gone.
        """
        if compiled.status or lost:
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, compiled.error or lost)
            return None
        kernel, error = self.kernel(compiled)
        if kernel is None:
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, error)
            return None
        try:
            return self.placed(work, kernel)
        except Exception as exc:  # computable for any configuration the search measured
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, exc)
            return None
