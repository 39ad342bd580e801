"""A strategy's options as data.

Each strategy module lists its own in ``OPTIONS``, a tuple of ``Option``. That table checks a
spec's ``strategy_options``. It is what ``--help`` lists and what docs/strategies.md shows. A
test holds the docs to the tables. There is one table so that the help, the docs and the refusal
of a misspelled option never disagree. They agree on each name, default and range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Value = int | float


class UnknownOption(ValueError):
    """A name no option of the strategy has: the caller may add what else the spec may set."""


@dataclass(frozen=True)
class Option:
    """One option: an integer (``kind`` int) or a number (``kind`` float, an integer will do).

    It lies between ``minimum`` and ``maximum`` inclusive, or above ``minimum`` where
    ``open_below``. ``meaning`` is one line for a user who reads the help."""

    name: str
    kind: type[int] | type[float]
    default: Value
    meaning: str
    minimum: Value
    maximum: Value
    open_below: bool = False

    @property
    def kind_name(self) -> str:
        return "integer" if self.kind is int else "number"

    @property
    def range(self) -> str:
        """The bounds as an interval, as the refusal of a value out of them says."""
        return f"{'(' if self.open_below else '['}{_short(self.minimum)}, {_short(self.maximum)}]"

    def check(self, value: object) -> Value:
        """The value, a float where the option is a number.

        Otherwise a ValueError of one line that names the option."""
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (self.kind is int and isinstance(value, float))
        ):
            raise ValueError(f"{self.name} must be {'an' if self.kind is int else 'a'} {self.kind_name}, got {value!r}")
        low_ok = value > self.minimum if self.open_below else value >= self.minimum
        if not (low_ok and value <= self.maximum):
            raise ValueError(f"{self.name} must be in {self.range}, got {value!r}")
        return value if self.kind is int else float(value)

    def describe(self) -> str:
        """``name (kind in range, default d): meaning``, the line the help and a refusal show."""
        return f"{self.name} ({self.kind_name} in {self.range}, default {self.default}): {self.meaning}"


@dataclass(frozen=True)
class Choice(Option):
    """A number that takes only the values ``allowed``.

    Its ``check`` refuses the others too, so a spec is refused before anything runs."""

    allowed: tuple[float, ...] = ()

    def check(self, value: object) -> float:
        checked = float(super().check(value))
        if checked not in self.allowed:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.allowed))}, got {value!r}")
        return checked


def values(
    strategy: str, table: tuple[Option, ...], given: Mapping[str, object], hints: Mapping[str, str]
) -> dict[str, Value]:
    """Every option of ``table``, checked, with its default where ``given`` has none.

    An unknown name raises ``UnknownOption`` with every option and its meaning. It adds
    ``hints[name]`` where there is one: why a similar option does not exist here. A bad value
    raises ValueError. Each message is one line that names the strategy."""
    known = {option.name: option for option in table}
    for name in given:
        if name not in known:
            why = f" ({hints[name]})" if name in hints else ""
            takes = f"its options: {'; '.join(o.describe() for o in table)}" if table else "it takes none"
            raise UnknownOption(f"strategy {strategy!r} has no option {name!r}{why}; {takes}")
    try:
        return {o.name: o.check(given[o.name]) if o.name in given else o.default for o in table}
    except ValueError as exc:
        raise ValueError(f"strategy {strategy!r}: {exc}") from None


def _short(bound: Value) -> str:
    """1e6 rather than 1000000 or 1e+06: the bounds far off are round numbers, said briefly."""
    return f"{bound:.5g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
