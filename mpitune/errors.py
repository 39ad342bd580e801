"""Errors a user can act on (the exit codes are in exits.py). Everything else is a bug and keeps
its traceback. Also the one check of a number a user sets, which every room refuses alike."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from typing import SupportsFloat


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
    """The one check of a number a user sets (a flag, an environment variable, a spec's field):
    seconds, intervals and margins are finite, and greater than 0, or at least 0 where 0 means
    something ("none", "off"). ``float()`` takes "nan" and "inf", and a NaN passes no comparison
    so it would silently skip every check after it. Raises ValueError with the reason, in a
    line the caller prefixes with the setting's name."""
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
    """``checked_number`` as an argparse ``type``: its reason becomes the flag's one error line
    (argparse says only "invalid value" for a ValueError)."""

    def number(text: str) -> float:
        try:
            return checked_number(text, zero_ok)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return number


def environment_number(
    variable: str, default: float, zero_ok: bool = False, environ: Mapping[str, str] | None = None
) -> float:
    """``variable``'s number, else ``default`` where it is unset or empty; a value that is no
    such number is refused in one line naming the variable, never replaced by the default."""
    text = (os.environ if environ is None else environ).get(variable, "").strip()
    if not text:
        return default
    try:
        return checked_number(text, zero_ok)
    except ValueError as exc:
        raise UserError(f"environment variable {variable}: {exc}") from None
