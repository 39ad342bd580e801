"""What a row of the run settings' table is (settings_table.py holds the rows).

A row names a setting's sources. They are its flag, its environment variable, its spec field
and its default. ``Setting.merged`` takes them in the one order ``SOURCES`` gives. docs/spec.md states that
order, and a test holds the two together. Light to import, as the table is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from mpitune.errors import environment_number
from mpitune.spec.checker import Checker
from mpitune.spec.setting_checks import Check

T = TypeVar("T")

# Where a setting's value comes from, the first that has one winning. A row lacks some sources.
SOURCES = ("command line", "environment", "spec", "default")


class _Unwritten:
    """What a spec wrote of a setting it cannot name: nothing, not even None."""


UNWRITTEN = _Unwritten()


@dataclass(frozen=True)
class Flag:
    """A setting's command-line flag.

    ``switch``: given means True. ``negates``: given means False (``--no-calibrate``). ``repeat``:
    each use adds a value. ``help`` may name ``{seconds}`` (a replay's are simulated) and
    ``{variable}`` (the row's environment variable).
    """

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Callable[[], list[str]] | None = None  # called when the parser is built
    switch: bool = False
    negates: bool = False
    repeat: bool = False

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    def text(self, seconds: str, variable: str) -> str:
        """The help line, its placeholders filled."""
        return self.help.format(seconds=seconds, variable=variable)

    def add_to(self, parser: argparse.ArgumentParser, seconds: str, variable: str) -> None:
        """The flag's argument in ``parser``."""
        extra: dict[str, Any] = {"help": self.text(seconds, variable)}
        if self.switch or self.negates:
            extra["action"] = "store_true"
        if self.repeat:
            extra.update(action="append", default=[])
        if self.type is not None:
            extra["type"] = self.type
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        if self.choices is not None:
            extra["choices"] = self.choices()
        parser.add_argument(self.name, **extra)

    def given(self, args: argparse.Namespace) -> Any:
        """What the command line says, None where the flag is absent."""
        value = getattr(args, self.dest)
        if self.switch:
            return True if value else None
        if self.negates:
            return False if value else None
        if self.repeat:
            return tuple(value) or None
        return value

    @property
    def shown(self) -> str:
        """The flag as docs/spec.md's tables show it."""
        return f"`{self.name}{' ' + self.metavar if self.metavar else ''}`"


@dataclass(frozen=True)
class Variable:
    """A setting's environment variable: a number of seconds. ``zero_ok``: 0 means "off"."""

    name: str
    zero_ok: bool = False

    def read(self, environ: Mapping[str, str] | None = None) -> float | None:
        """Its number, None where it is unset or empty.

        A value that is no such number raises ``UserError`` naming the variable.
        """
        return environment_number(self.name, None, self.zero_ok, environ)


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One run setting, typed ``T`` as the command line gives it (``Setting[int | None]``).

    ``name``: its field in ``RunSettings`` and its keyword in ``Overrides``. ``field``: the name a
    spec and ``tune_kernel`` set it by (``name`` where not given). Error lines name it.
    ``default``: the spec's, as a spec writes it. ``spec``: False where the spec cannot set it.
    ``budget``: also an entry of ``strategy_options``, where Kernel Tuner keeps the budget.
    ``variable``: its environment variable, if any. ``check``: the value ``RunSettings`` holds.
    With ``fills``, it fills several fields. None: another module takes it by hand.
    ``meaning`` and ``shown_default`` are docs/spec.md's.
    """

    name: str
    default: Any = None
    field: str = ""
    spec: bool = True
    budget: bool = False
    flag: Flag | None = None
    variable: Variable | None = None
    check: Check | None = None
    fills: tuple[str, ...] = ()
    meaning: str = ""
    shown_default: str = ""

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.name)

    @property
    def variable_name(self) -> str:
        """Its environment variable's name; empty where it has none."""
        return self.variable.name if self.variable else ""

    def merged(self, given: T | None, written: Any = UNWRITTEN, environ: Mapping[str, str] | None = None) -> T:
        """The setting's value from its first source that has one, in ``SOURCES``' order.

        Args:
            given: the command line's value; None where it gives none.
            written: what the spec wrote; ``UNWRITTEN`` where it cannot name the setting.
            environ: the environment; None for this process's.

        Returns:
            The value, unchecked (``checked`` checks it).
        """
        if given is not None:
            return given
        from_environment = self.variable.read(environ) if self.variable else None
        if from_environment is not None:
            return cast(T, from_environment)  # a row with a variable is typed seconds
        return self.default if written is UNWRITTEN else written

    def checked(self, check: Checker, value: Any) -> Any:
        """``value`` as ``RunSettings`` holds it. A ``SpecError`` names ``field`` if it is wrong."""
        assert self.check is not None, f"{self.name} is taken by hand"
        return self.check(check, self.field, value)

    def settled(self, check: Checker, value: Any) -> dict[str, Any]:
        """The ``RunSettings`` fields ``value`` gives, checked. None gives none: the field's default."""
        checked = self.checked(check, value)
        if checked is None:
            return {}
        return dict(zip(self.fills, checked)) if self.fills else {self.name: checked}

    def add_flag(self, parser: argparse.ArgumentParser, seconds: str) -> None:
        """The row's flag in ``parser``; ``seconds`` says whose seconds they are."""
        assert self.flag is not None, f"{self.name} has no flag"
        self.flag.add_to(parser, seconds, self.variable_name)

    def row(self) -> str:
        """docs/spec.md's row of a spec's setting."""
        flag = self.flag.shown if self.flag else ""
        return f"| `{self.field}` | {self.meaning} | {self.shown_default} | {flag} |"

    def command_line_row(self) -> str:
        """docs/spec.md's row of a setting the spec cannot name."""
        assert self.flag is not None, f"{self.name} has no flag"
        variable = f"`{self.variable_name}`" if self.variable else ""
        help = self.flag.text("seconds", self.variable_name)
        return f"| {self.flag.shown} | {variable} | {help} |"
