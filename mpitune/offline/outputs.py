"""Files the offline verbs write: never one of their inputs, and never half-written.

An output given as an input's path (or another path to the same file: a symlink, a hard link)
would replace the data it was made from, so it is refused, comparing device and inode. Every
output is written to a temporary file in its own folder and renamed into place, so a failure
(a full disk, a bad value) leaves any earlier file of that name as it was; the system's refusal
is raised as an ``OSError`` naming the output, which the command line reports in one line.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from mpitune.errors import UserError


def refuse_inputs(out: str, *inputs: str) -> None:
    """A ``UserError`` when ``out`` is one of ``inputs`` (the same file by any path)."""
    try:
        target = os.stat(out)
    except OSError:
        return  # nothing there yet (or a dangling link): no input to lose
    for given in inputs:
        try:
            source = os.stat(given)
        except OSError:
            continue
        if (source.st_dev, source.st_ino) == (target.st_dev, target.st_ino):
            raise UserError(f"{out} is the input {given}; write the output to another file")


@contextmanager
def atomic_text(path: str) -> Iterator[IO[str]]:
    """A text file (gzipped when ``path`` ends in .gz) that appears at ``path`` only once complete."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{path}: the folder {directory} does not exist")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None  # named by its own path, not the temporary's
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, "wb") as raw:
            if path.endswith(".gz"):
                with gzip.open(raw, "wt", encoding="utf-8") as fh:
                    yield fh
            else:
                with open(raw.fileno(), "w", encoding="utf-8", closefd=False) as fh:
                    yield fh
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temp, path)
    except OSError as exc:
        os.unlink(temp)
        raise OSError(exc.errno, exc.strerror, path) from None  # named by its own path, not the temporary's
    except BaseException:
        os.unlink(temp)
        raise


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
