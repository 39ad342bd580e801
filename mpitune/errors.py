"""Errors a user can act on; the exit codes are in exits.py.

Everything else is a bug and keeps its traceback. This module also holds the one check of a
number a user sets. It holds the one check of a file a user names for mpitune to read. Every room
refuses these alike."""

from __future__ import annotations

import argparse
import errno
import math
import os
import stat
from collections.abc import Callable, Mapping
from typing import SupportsFloat, TypeVar


class UserError(Exception):
    """A problem in what the user gave us; reported as one line, ``ExitCode.USER_ERROR``."""


class SpecError(UserError):
    """A spec file that cannot be tuned, with the file and the field to blame."""

    def __init__(self, spec_path: str, field: str, message: str):
        self.spec_path = spec_path
        self.field = field
        super().__init__(f"{spec_path}: {field}: {message}")


class CacheMismatchError(UserError):
    """The cache file belongs to a different tuning problem."""


def checked_number(value: str | SupportsFloat, zero_ok: bool = False) -> float:
    """The one check of a number a user sets: a flag, an environment variable, a spec's field.

    Seconds, intervals and margins are finite. They are greater than 0, or at least 0 where 0
    means something ("none", "off"). ``float()`` takes "nan" and "inf". A NaN passes no
    comparison, so it would silently skip every check after it. Raises ValueError with the
    reason. The caller prefixes that line with the setting's name."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    if number < 0 or (number == 0 and not zero_ok):
        raise ValueError(f"must be {'at least' if zero_ok else 'greater than'} 0, got {value!r}")
    return number


def number_flag(zero_ok: bool = False) -> Callable[[str], float]:
    """``checked_number`` as an argparse ``type``.

    Its reason becomes the flag's one error line. For a ValueError argparse says only "invalid
    value"."""

    def number(text: str) -> float:
        try:
            return checked_number(text, zero_ok)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return number


_Default = TypeVar("_Default", float, float | None)


def environment_number(
    variable: str, default: _Default, zero_ok: bool = False, environ: Mapping[str, str] | None = None
) -> float | _Default:
    """``variable``'s number, else ``default`` where it is unset or empty.

    A value that is no such number is refused in one line naming the variable. It is never
    replaced by the default."""
    text = (os.environ if environ is None else environ).get(variable, "").strip()
    if not text:
        return default
    try:
        return checked_number(text, zero_ok)
    except ValueError as exc:
        raise UserError(f"environment variable {variable}: {exc}") from None


# What a path that is not a regular file is, by the type bits of its ``st_mode``.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: str) -> str | None:
    """Why a file a user names for mpitune to read is not one, as the end of a line.

    Such a file is a spec, its kernel source, a prior or measured data. The reason reads like
    "is a directory, not a regular file". None for a regular file, and for nothing at all. Each
    caller words "not found" in its own way. This is the one check every room refuses alike. It
    uses ``os.stat`` alone. Opening a named pipe waits for a writer, forever. Reading a device
    never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link that loops"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"is a symbolic link to nothing ({os.readlink(path)})" if os.path.islink(path) else None
        return f"cannot be reached: {exc.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for is_kind, name in _NOT_REGULAR if is_kind(mode)), None)
    return f"is {kind}, not a regular file" if kind else "is not a regular file"
