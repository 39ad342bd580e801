"""Keeping the kernel cache's folder within its bound.

Past it, the least recently used entries go. So do the temporary files of writers killed before
they renamed them into place.

An entry's mtime is its last use: written, or touched when loaded. So eviction needs no index
that every rank and compile worker of a node would share. Any of them may scan and remove at
the same moment. A file gone under a scan or a removal was removed by another. A reader whose
entry went compiles again. A scan stats every entry, so a process scans at its first write.
After that it scans when its running estimate passes the bound: its last scan's total plus its
own writes since. It also scans every ``SCAN_EVERY_WRITES`` writes, since the others write too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

KEEP_FRACTION = 0.9  # eviction goes below the bound, so that the next writes do not evict again at once
STALE_TEMP_S = 3600.0  # a temporary file this old has no writer left (one writes for milliseconds)
SCAN_EVERY_WRITES = 64
# The names kernel_cache.KernelCache gives: <2 hex>/<64 hex>.kernel, and beside each entry the
# temporary files it is written to, .<16 hex>.<mkstemp's letters>.tmp; nothing else is touched.
_ENTRY = re.compile(r"[0-9a-f]{64}\.kernel")
_TEMP = re.compile(r"\.[0-9a-f]{16}\.[a-z0-9_]+\.tmp")
_SUBFOLDER = re.compile(r"[0-9a-f]{2}")


@dataclass(frozen=True)
class _Entry:
    path: str
    size_bytes: int
    mtime_ns: int  # its last use


@dataclass
class _Estimate:
    """This process's idea of a folder's total between scans: its last scan's, plus its writes."""

    size_bytes: int
    writes: int = 0


_estimates: dict[str, _Estimate] = {}  # by folder


def wrote(folder: str, size_bytes: int, bound_bytes: int) -> None:
    """An entry of ``size_bytes`` was written to ``folder``: scan it (and evict) when the rule of
    the module's docstring says so. ``bound_bytes`` 0 is no bound: only the first write scans, to
    remove stale temporary files."""
    estimate = _estimates.get(folder)
    if estimate is not None:
        estimate.size_bytes += size_bytes
        estimate.writes += 1
        if not bound_bytes or (estimate.size_bytes <= bound_bytes and estimate.writes < SCAN_EVERY_WRITES):
            return
    _estimates[folder] = _Estimate(upkeep(folder, bound_bytes))


def upkeep(folder: str, bound_bytes: int) -> int:
    """Remove stale temporary files, and the least recently used entries past the bound.

    Temporary files are stale after ``STALE_TEMP_S``. Entries go when they take more than
    ``bound_bytes`` (0: no bound), until they take at most ``KEEP_FRACTION`` of it. Returns the
    bytes the entries left take.
    """
    entries = _scan(folder)
    total_bytes = sum(entry.size_bytes for entry in entries)
    if not bound_bytes or total_bytes <= bound_bytes:
        return total_bytes
    target_bytes = int(bound_bytes * KEEP_FRACTION)
    removed = 0
    for entry in sorted(entries, key=lambda entry: entry.mtime_ns):
        if total_bytes <= target_bytes:
            break
        if _evict(entry):
            total_bytes -= entry.size_bytes
            removed += 1
    log.debug(
        "kernel cache %s: %d least recently used entries removed, %.1f MiB left (bound %.1f MiB)",
        folder,
        removed,
        total_bytes / (1 << 20),
        bound_bytes / (1 << 20),
    )
    return total_bytes


def _scan(folder: str) -> list[_Entry]:
    """Every entry of ``folder``, removing the stale temporary files on the way; a file that
    vanishes or cannot be read is skipped (another process removed or is replacing it)."""
    stale_ns = time.time_ns() - int(STALE_TEMP_S * 1e9)
    entries = []
    for subfolder in _listing(folder):
        if not _SUBFOLDER.fullmatch(subfolder.name):
            continue
        for item in _listing(subfolder.path):
            is_entry = _ENTRY.fullmatch(item.name) is not None
            if not is_entry and not _TEMP.fullmatch(item.name):
                continue
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if is_entry:
                entries.append(_Entry(item.path, info.st_size, info.st_mtime_ns))
            elif info.st_mtime_ns < stale_ns:
                log.debug("kernel cache: removing %s, left by a writer killed an hour or more ago", item.path)
                with contextlib.suppress(OSError):
                    os.unlink(item.path)
    return entries


def _listing(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as items:
            return list(items)
    except OSError:  # gone, or not a folder
        return []


def _evict(entry: _Entry) -> bool:
    """Remove ``entry`` unless it was used since the scan (loaded, or written again); whether it
    is gone."""
    try:
        if os.stat(entry.path, follow_symlinks=False).st_mtime_ns != entry.mtime_ns:
            return False
        os.unlink(entry.path)
    except FileNotFoundError:  # another process removed it
        return True
    except OSError as exc:
        log.debug("kernel cache: cannot remove %s (%s)", entry.path, exc)
        return False
    return True
