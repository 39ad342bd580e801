"""A problem's large arrays handed to a rank's worker in shared memory, not through its pipe.

Pickled through the pipe, an array is copied four times. It goes into the pickle, through the
pipe, out of it, and out of the pickle. For large arrays that is a noticeable share of a rank's
start-up (docs/performance.md, "Start-up"). Here the rank copies each large array once, in a
few threads. It copies into an anonymous memory file (``memfd_create``). The file's descriptor
goes to the worker over the pipe's socket. The worker maps it copy-on-write. So a backend may
write to its arguments (the C backend's outputs) without the rank seeing it. The file has no
name, so a rank killed at any moment leaves nothing behind. Its memory is freed with the last
mapping. Some arrays travel in the pickle as before: small ones, those of Python objects, those
that are not contiguous, and all where no memory file can be made.
"""

from __future__ import annotations

import logging
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mpitune.model.problem import Kernel

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20  # smaller arrays cost the pickle next to nothing
ALIGN_BYTES = 4096  # each array starts on a page, as an allocator would place it
COPY_THREADS = 4  # numpy's copy releases the GIL; more threads than this gain little
COPY_CHUNK_BYTES = 16 << 20  # what one thread copies at a time


@dataclass(frozen=True)
class SharedArray:
    """Where an array of the problem lies in the memory file, standing in for it in the pickle."""

    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool  # laid out in Fortran order (its own), not C order


class Shared:
    """The rank's side of the memory file: open until the worker has mapped it."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def close(self) -> None:
        """The rank's descriptor closed; the worker's mapping keeps the memory alive."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _eligible(a: Any) -> bool:
    return (
        isinstance(a, np.ndarray)
        and a.nbytes >= MIN_BYTES
        and not a.dtype.hasobject
        and (a.flags.c_contiguous or a.flags.f_contiguous)
    )


def _aligned(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def _place(arrays: list[Any], offset: int, placed: list[tuple[np.ndarray, SharedArray]]) -> tuple[list[Any], int]:
    """``arrays`` with each eligible one replaced by its place in the file, from ``offset`` on."""
    out = []
    for a in arrays:
        if _eligible(a):
            ref = SharedArray(offset, a.shape, a.dtype, not a.flags.c_contiguous)
            placed.append((a, ref))
            offset += _aligned(a.nbytes)
            a = ref
        out.append(a)
    return out, offset


def share(problem: Kernel) -> tuple[Kernel, Shared | None]:
    """The problem with its large arrays moved into a new memory file, and the file.

    Their places stand in for them in the problem. ``(problem, None)`` when nothing is large
    enough or no memory file can be made here. The pickle then carries everything."""
    placed: list[tuple[np.ndarray, SharedArray]] = []
    arguments, size = _place(list(problem.arguments), 0, placed)
    answer, size = _place(list(problem.answer), size, placed) if problem.answer is not None else (None, size)
    if not placed or not hasattr(os, "memfd_create"):
        return problem, None
    try:
        fd = os.memfd_create("mpitune-problem", os.MFD_CLOEXEC)
    except OSError as exc:
        log.debug("no memory file for the problem's arrays (%s): they go through the pipe", exc)
        return problem, None
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as view:
            _copy_in(view, placed)
    except (OSError, ValueError, BufferError) as exc:
        os.close(fd)
        log.debug("the problem's arrays did not fit a memory file (%s): they go through the pipe", exc)
        return problem, None
    return replace(problem, arguments=arguments, answer=answer), Shared(fd, size)


def _copy_in(view: mmap.mmap, placed: list[tuple[np.ndarray, SharedArray]]) -> None:
    """Copy each array to its place, in chunks spread over a few threads.

    Touching fresh pages, not copying bytes, is most of the cost. The kernel does that in
    parallel."""
    jobs = []
    for a, ref in placed:
        flat = a.reshape(-1, order="F" if ref.fortran else "C").view(np.uint8)
        dst = np.frombuffer(view, np.uint8, count=a.nbytes, offset=ref.offset)
        jobs += [(dst, flat, s, min(s + COPY_CHUNK_BYTES, a.nbytes)) for s in range(0, a.nbytes, COPY_CHUNK_BYTES)]
    with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(jobs), os.cpu_count() or 1)) as pool:
        for done in [pool.submit(_copy_chunk, *job) for job in jobs]:
            done.result()


def _copy_chunk(dst: np.ndarray, src: np.ndarray, start: int, end: int) -> None:
    dst[start:end] = src[start:end]


def attach_arrays(problem: Kernel, fd: int, size: int) -> Kernel:
    """In the worker: the problem with each place in the file replaced by its array.

    Arrays are mapped copy-on-write, pages read ahead. The descriptor is closed here."""
    try:
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
        view = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)

    def array(a: Any) -> Any:
        if not isinstance(a, SharedArray):
            return a
        return np.ndarray(a.shape, a.dtype, buffer=view, offset=a.offset, order="F" if a.fortran else "C")

    return replace(
        problem,
        arguments=[array(a) for a in problem.arguments],
        answer=None if problem.answer is None else [array(a) for a in problem.answer],
    )
