"""Opening a cache file for reading without ever hanging on damage, and reading it back whole.

HDF5 in SWMR mode retries a metadata read whose checksum fails, with growing sleeps, for minutes.
That is right while a writer may be halfway through a write, and wrong for a damaged file. So
SWMR is used only while a writer is alive. A killed writer may leave a file marked as being
written. It is read from an image in memory with the mark cleared there. The file itself is not
touched. Every chunk of a file written since checksums were added carries a Fletcher-32 checksum.
So reading every dataset in full finds flipped bytes in the data, as well as in HDF5's metadata.
"""

from __future__ import annotations

import io

import h5py

from mpitune.store.lock import h5_file, writer_alive
from mpitune.store.superblock import clear_flags_in


def image(path: str, writable: bool = False) -> h5py.File:
    """The file as an in-memory copy with HDF5's open-for-write mark cleared.

    It is what a crash repair would start from. ``writable``: changes go to the copy only."""
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    clear_flags_in(data)
    return h5py.File(io.BytesIO(bytes(data)), "r+" if writable else "r")


def open_for_reading(path: str) -> h5py.File:
    """Open the file as an SWMR reader while a run writes it, else plainly.

    A plain reader refuses damage at once. A file a killed writer left marked is read from an image
    (see ``image``)."""
    if writer_alive(path):
        return h5_file(path, "r", libver="latest", swmr=True)
    try:
        return h5_file(path, "r")
    except OSError as exc:
        if "h5clear" not in str(exc):
            raise
    return image(path)


def read_back(f: h5py.File) -> list[str]:
    """Read every attribute and every dataset in full; what could not be read, as lines.

    Any exception here comes from HDF5 decoding damaged bytes, whatever its type. The cause is a
    checksum, a filter, a broken header or B-tree. So every one is a finding rather than a crash."""
    problems: list[str] = []
    objects: list[h5py.HLObject] = [f]

    def collect(name: str, obj: h5py.HLObject) -> None:
        objects.append(obj)

    try:
        f.visititems(collect)
    except Exception as exc:
        return [f"the file's index of datasets cannot be read ({exc})"]
    for obj in objects:
        try:
            for key in obj.attrs:
                obj.attrs[key]
            if isinstance(obj, h5py.Dataset):
                obj[...]
        except Exception as exc:
            problems.append(f"{obj.name or '?'} cannot be read back: {exc}")
    return problems
