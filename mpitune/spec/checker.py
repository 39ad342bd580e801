"""The one way a spec check fails: a ``SpecError`` in one line. It names the file and the field."""

from __future__ import annotations

import numbers
from typing import Any, NoReturn

from mpitune.errors import SpecError, checked_number


class Checker:
    """Raises SpecError for one spec file; keeps the file name in one place."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, name: str, message: str) -> NoReturn:
        # One line on stderr, whatever the message quotes (a multi-line exception text).
        raise SpecError(self.path, name, " ".join(message.splitlines()))

    def int_(self, name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            self.fail(name, f"must be an integer, got {type(value).__name__} {value!r}")
        if int(value) < minimum:
            self.fail(name, f"must be at least {minimum}, got {value}")
        return int(value)

    def number(self, name: str, value: Any, zero_ok: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            self.fail(name, f"must be a number, got {type(value).__name__} {value!r}")
        try:
            return checked_number(value, zero_ok)
        except ValueError as exc:
            self.fail(name, str(exc))

    def str_list(self, name: str, value: Any) -> list[str]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            self.fail(name, f"must be a list of strings, got {value!r}")
        return list(value)
