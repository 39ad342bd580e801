"""How far the kernel cache reaches (kernel_cache.py): off, the ranks of one node, or every node.

Some rank already compiled what the ranks compile a second time: a confirmation's candidates,
each calibration's reference. Its image is in the kernel cache folder of that rank's node.
Every node may see the same folder: the default one is in the home folder, which most clusters
share. Then every rank loads it from there instead of compiling it again. Where the folder is
the node's own, only that node's ranks do. A replay of data that does not record those
compiles' cost (a Kernel Tuner cache) must know which, to charge them (spec/replay.py). It asks
here, and says what it assumed.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mpitune.backends.kernel_cache import cache_folder

# File systems that the nodes of a cluster share, by the type /proc/self/mounts gives them.
SHARED_FILE_SYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "fuse.beegfs",
        "cifs",
        "smb3",
        "ceph",
        "fuse.ceph",
        "fuse.glusterfs",
        "glusterfs",
        "panfs",
        "wekafs",
        "afs",
        "fuse.sshfs",
    }
)
# A cached image read and loaded instead of compiled: 2 ms for the C backend's libraries on a
# 2-core AMD EPYC, 2.4 ms a cubin on one NVIDIA H100 (docs/performance.md, "Compiled kernels that
# outlive the run"); a network file system adds a round trip or two.
LOAD_S = 0.005
MOUNTS = "/proc/self/mounts"
_OCTAL = re.compile(r"\\([0-7]{3})")


class Reach(enum.Enum):
    """Which ranks find an image that one rank compiled in the kernel cache."""

    OFF = "off"  # none: the cache is off
    NODE = "node"  # the ranks of its node: the folder is the node's own
    SHARED = "shared"  # every rank: the folder is on a file system that every node shares


@dataclass(frozen=True)
class CacheReach:
    """The reach of this machine's kernel cache and why, in words for a replay's line."""

    reach: Reach
    why: str


def file_system(path: str, mounts: str = MOUNTS) -> str:
    """The type of the file system that holds ``path`` (or its nearest folder that exists): that
    of the longest mount point above it in ``mounts``; '' where it cannot be read."""
    path = os.path.realpath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    best, kind = "", ""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = _unescape(fields[1])
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return ""
    return kind


def _unescape(field: str) -> str:
    r"""A mount point as /proc/self/mounts writes it, with its octal escapes (``\040``) undone:
    the kernel escapes only space, tab, newline and backslash, so each is one character."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def cache_reach(environ: Mapping[str, str] | None = None, mounts: str = MOUNTS) -> CacheReach:
    """The reach of the kernel cache that ``MPITUNE_KERNEL_CACHE`` (in ``environ``) names here."""
    folder = cache_folder(environ)
    if not folder:
        return CacheReach(Reach.OFF, "the kernel cache is off (MPITUNE_KERNEL_CACHE)")
    kind = file_system(folder, mounts)
    if kind in SHARED_FILE_SYSTEMS:
        return CacheReach(Reach.SHARED, f"the kernel cache {folder} is on {kind}, which the nodes share")
    return CacheReach(Reach.NODE, f"the kernel cache {folder} is on {kind or 'a file system'} of this node")
