"""Telling a failed write (a full disk, a read-only folder) from a bug, for one line and
``ExitCode.CANNOT_WRITE``.

h5py reports the system's refusal as an ``OSError`` or a ``RuntimeError`` whose text holds
"errno = 28"; plain Python writes raise ``OSError`` with ``errno`` set. Either way the data
already recorded is intact (the cache is flushed per batch, outputs are renamed into place),
so the user needs to know what the system said, not a traceback.
"""

from __future__ import annotations

import errno
import re

REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}
_H5_ERRNO = re.compile(r"errno = (\d+)")
_H5_FILE = re.compile(r"filename = '([^']*)'")


def cannot_write(exc: BaseException) -> str | None:
    """The line for an exception that is the system refusing a write; None for anything else."""
    if not isinstance(exc, (OSError, RuntimeError)):
        return None
    text = str(exc)
    found = _H5_ERRNO.search(text)
    code = exc.errno if isinstance(exc, OSError) and exc.errno else int(found.group(1)) if found else 0
    if code not in REASONS:
        return None
    named = _H5_FILE.search(text)
    path = getattr(exc, "filename", None) or (named.group(1) if named else "the file")
    return f"{path}: cannot write: {REASONS[code]}"
