"""How each run setting's value is checked (settings_table.py names each setting's check).

A check is a function of the checker, the field an error line names and the value. It returns
the value as ``RunSettings`` holds it. Light to import: the command line reads the table before
any verb. So a check that needs numpy's modules imports them when it runs.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpitune.spec.checker import Checker

Check = Callable[[Checker, str, Any], Any]


def optional(check: Check) -> Check:
    """``check``, except that None stays None: the field's default."""
    return lambda c, field, value: None if value is None else check(c, field, value)


def at_least(least: int) -> Check:
    return optional(lambda c, field, value: c.int_(field, value, least))


def positive_seconds(c: Checker, field: str, value: Any) -> float:
    return c.number(field, value)


def switch(c: Checker, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        c.fail(field, f"must be True or False, got {value!r}")
    return value


def text(c: Checker, field: str, value: Any) -> str:
    return str(value)


def fraction_margin(c: Checker, field: str, value: Any) -> float:
    margin = c.number(field, value, zero_ok=True)
    if not 0 <= margin < 1:
        c.fail(field, f"must be a fraction from 0 to below 1 (0.02: 2 %), got {margin!r}")
    return margin


def racing(c: Checker, field: str, value: Any) -> tuple[bool, Any]:
    """Racing on or off, and its rule. True races by the default rule, on the first launch
    (model/judging/racing.py)."""
    from mpitune.model.judging.racing import RaceRule

    rules = {rule.value: rule for rule in RaceRule}
    if isinstance(value, str) and value in rules:
        return True, rules[value]
    if isinstance(value, bool):
        return value, RaceRule.FIRST
    c.fail(field, f"must be True, False or one of {', '.join(map(repr, rules))}, got {value!r}")


def confirm(c: Checker, field: str, value: Any) -> int:
    """How many candidates to confirm once the search ends. ``True``: the default number.
    ``False`` or 0: none. Else a number, up to the most a confirmation takes."""
    from mpitune.model.work import DEFAULT_CANDIDATES, MOST_CANDIDATES

    if value is True:
        return DEFAULT_CANDIDATES
    if value is False:
        return 0
    if isinstance(value, int) and 0 <= value <= MOST_CANDIDATES:
        return value
    c.fail(field, f"must be True, False or a number of candidates from 0 to {MOST_CANDIDATES}, got {value!r}")


def _member(c: Checker, field: str, value: Any, kind: type[enum.Enum]) -> Any:
    """The member of ``kind`` whose value ``value`` is. The line for a bad one names them all."""
    values = {m.value: m for m in kind}
    if not isinstance(value, str) or value not in values:
        c.fail(field, f"must be one of {', '.join(map(repr, values))}, got {value!r}")
    return values[value]


def schedules() -> list[str]:
    """Every ``Schedule``'s value, in its order."""
    from mpitune.model.problem import Schedule

    return [s.value for s in Schedule]


def schedule(c: Checker, field: str, value: Any) -> Any:
    """How rank 0 hands out work, by a Schedule's value."""
    from mpitune.model.problem import Schedule

    return _member(c, field, value, Schedule)


def device_choices() -> list[str]:
    """Every ``Devices``' value, in its order."""
    from mpitune.model.problem import Devices

    return [d.value for d in Devices]


def devices(c: Checker, field: str, value: Any) -> Any:
    """What a job of several device models does, by a Devices value."""
    from mpitune.model.problem import Devices

    return _member(c, field, value, Devices)


def portable_count(c: Checker, field: str, value: Any) -> int:
    """How many portable candidates a job of several device models times on every model: as many
    as a confirmation takes at most."""
    from mpitune.model.work import MOST_CANDIDATES

    count = c.int_(field, value, 0)
    if count > MOST_CANDIDATES:
        c.fail(field, f"must be a number of candidates from 0 to {MOST_CANDIDATES}, got {count}")
    return count


def cache(c: Checker, field: str, value: Any) -> str:
    """The results file must be one mpitune can create or open: found here, not after start-up.

    The store says whether an existing file is one mpitune wrote. It also says whether the system
    lets this run write it: a read-only file system is not "permission denied"."""
    if value is not None and not isinstance(value, (str, Path)):
        c.fail(field, f"must be a file path, got {value!r}")
    path = os.path.abspath(value or Path(c.path).stem + ".h5")
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        c.fail(field, f"{path} is a directory; name a file such as {os.path.join(path, 'results.h5')}")
    if not os.path.isdir(directory):
        c.fail(field, f"cannot write {path}: directory {directory} does not exist")
    return path
