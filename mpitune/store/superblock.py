"""Clearing the "open for write" mark a killed writer leaves in an HDF5 file.

A file written in SWMR mode carries flags in its superblock while a writer has it open. A writer
killed with SIGKILL never clears them. HDF5 then refuses to open the file for writing again
("may use h5clear"). The data is intact, since SWMR orders its writes for exactly this case. So
a resumed run clears the flags itself, instead of asking users for HDF5's command-line tools.
Only superblock versions 2 and 3 are handled; ``libver="latest"`` writes those. They end in a
lookup3 checksum, recomputed here.
"""

from __future__ import annotations

import os
import struct

SIGNATURE = b"\x89HDF\r\n\x1a\n"
_M = 0xFFFFFFFF
_SUPERBLOCK_MAX = 12 + 4 * 8 + 4  # versions 2 and 3 with 8-byte addresses


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, the checksum of HDF5 metadata."""
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & _M
    i = 0
    while length > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _M
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M
        a = (a - c) & _M
        a ^= _rot(c, 4)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 6)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 8)
        b = (b + a) & _M
        a = (a - c) & _M
        a ^= _rot(c, 16)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 19)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 4)
        b = (b + a) & _M
        length -= 12
        i += 12
    if length == 0:
        return c
    tail = data[i:] + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & _M
    b = (b + int.from_bytes(tail[4:8], "little")) & _M
    c = (c + int.from_bytes(tail[8:12], "little")) & _M
    c ^= b
    c = (c - _rot(b, 14)) & _M
    a ^= c
    a = (a - _rot(c, 11)) & _M
    b ^= a
    b = (b - _rot(a, 25)) & _M
    c ^= b
    c = (c - _rot(b, 16)) & _M
    a ^= c
    a = (a - _rot(c, 4)) & _M
    b ^= a
    b = (b - _rot(a, 14)) & _M
    c ^= b
    c = (c - _rot(b, 24)) & _M
    return c


def is_hdf5(path: str) -> bool:
    """Whether the file carries HDF5's signature where a superblock may start (0, 512, 1024,
    2048, ... bytes in), without loading the HDF5 library."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        offset = 0
        while offset + len(SIGNATURE) <= size:
            fh.seek(offset)
            if fh.read(len(SIGNATURE)) == SIGNATURE:
                return True
            offset = 512 if offset == 0 else 2 * offset
    return False


def clear_flags_in(head: bytearray) -> bool:
    """Clear the open-for-write flags in the file's first bytes, at least its superblock.

    The superblock's checksum is recomputed. False if there were no flags to clear."""
    if bytes(head[:8]) != SIGNATURE:
        raise ValueError("not an HDF5 file")
    if len(head) < 12 or head[8] not in (2, 3) or head[11] == 0:
        return False  # older superblocks carry no such flags
    size = 12 + 4 * head[9] + 4  # four addresses of head[9] bytes, then the checksum
    if len(head) < size:
        raise ValueError("the superblock is cut short")
    head[11] = 0
    head[size - 4 : size] = struct.pack("<I", lookup3(bytes(head[: size - 4])))
    return True


def clear_write_flags(path: str) -> bool:
    """Clear the superblock's open-for-write flags in the file; False if there were none.

    Call it only when no process is writing the file. mpitune holds a lock on it for that.
    """
    with open(path, "r+b") as fh:
        head = bytearray(fh.read(_SUPERBLOCK_MAX))
        try:
            if not clear_flags_in(head):
                return False
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        fh.seek(0)
        fh.write(head)
    return True
