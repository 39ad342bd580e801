"""Kernel Tuner's per-configuration kernel settings: ``defines``, ``smem_args``, ``cmem_args``.

A spec may make a preprocessor definition or the dynamic shared memory size a function of the
configuration (``lambda p: p["block_size_x"] * 4``). Such callables live in the spec, on rank 0
alone. They cannot travel to the ranks: a lambda does not pickle. So rank 0 resolves them per
configuration into plain values (``Derived``) that travel with the batch. The worker ranks never
see a callable. Constant memory (``cmem_args``) is data. It travels with the problem like the
arguments.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpitune.model.restrictions import evaluate

_TOKEN = re.compile(r"\b[A-Za-z_]\w*\b")
# A define's bytes: each is one argument of the compiler's command, which holds 128 KiB on Linux.
MAX_DEFINE_BYTES = 100_000


@dataclass(frozen=True)
class Derived:
    """What rank 0 resolved for one configuration.

    ``defines`` are the preprocessor definitions the kernel gets instead of the default ones.
    None means the default: every parameter and the block and grid sizes. The dynamic shared
    memory is in bytes."""

    defines: dict[str, str] | None = None
    smem_bytes: int = 0


@dataclass
class KernelExtras:
    """The three settings as the spec gave them (callables included: rank 0 only)."""

    defines: dict[str, Any] | None = None
    smem_size: Any = 0  # int, expression string or callable(config) -> bytes
    cmem: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def varies(self) -> bool:
        """Whether configurations need anything resolved on rank 0."""
        return self.defines is not None or not isinstance(self.smem_size, int) or self.smem_size != 0

    def derive(self, config: Mapping[str, Any]) -> Derived:
        """Resolve the settings for one configuration; raises ValueError naming the setting."""
        defines = None
        if self.defines is not None:
            defines = {name: define_text(value, config, name) for name, value in self.defines.items()}
        return Derived(defines, smem_bytes(self.smem_size, config))

    def for_workers(self) -> KernelExtras:
        """Only the constant memory travels; the rest reaches the ranks as ``Derived``."""
        return KernelExtras(cmem=self.cmem)

    def identity(self) -> dict[str, Any]:
        """What of these settings changes measured results: part of the problem's identity."""
        out: dict[str, Any] = {}
        if self.defines is not None:
            out["defines"] = {k: _text(v) for k, v in self.defines.items()}
        if self.smem_size != 0:
            out["smem_args"] = _text(self.smem_size)
        if self.cmem:
            out["cmem_args"] = {k: f"{v.dtype.str}{list(v.shape)}" for k, v in self.cmem.items()}
        return out


def substitute(text: str, config: Mapping[str, Any]) -> str:
    """Replace every whole-word parameter name in ``text`` by its value.

    Kernel Tuner does so in string-valued defines and in template arguments of a kernel name."""

    def value(match: re.Match[str]) -> str:
        name = match.group(0)
        if name not in config:
            return str(name)
        v = config[name]
        return str(int(v)) if isinstance(v, (bool, np.bool_)) else str(v)

    return _TOKEN.sub(value, text)


def define_text(value: Any, config: Mapping[str, Any], name: str = "") -> str:
    """The text after ``#define NAME`` for one configuration."""
    if callable(value):
        try:
            value = value(dict(config))
        except Exception as exc:
            raise ValueError(f"defines[{name!r}] failed on {dict(config)}: {type(exc).__name__}: {exc}") from None
    elif isinstance(value, str):
        value = substitute(value, config)
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    text = str(value)
    # Neither reaches the compiler as an argument: the worker died on it.
    if "\0" in text:
        raise ValueError(f"defines[{name!r}] is {text[:40]!r} for {dict(config)}, which holds a NUL character")
    if len(text.encode(errors="replace")) > MAX_DEFINE_BYTES:
        raise ValueError(f"defines[{name!r}] is {text[:40]!r}... for {dict(config)}, over {MAX_DEFINE_BYTES} bytes")
    return text.replace("\n", "\\\n")


def smem_bytes(size: Any, config: Mapping[str, Any]) -> int:
    """Dynamic shared memory in bytes for one configuration."""
    try:
        if callable(size):
            size = size(dict(config))
        elif isinstance(size, str):
            size = evaluate(size, config)  # the language of restriction strings and grid_div
    except Exception as exc:
        raise ValueError(f"smem_args size failed on {dict(config)}: {type(exc).__name__}: {exc}") from None
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"smem_args size is {size!r} for {dict(config)}; it must be a whole number of bytes >= 0")
    return int(size)


def _text(value: Any) -> str:
    if callable(value):
        try:
            return inspect.getsource(value).strip()
        except (OSError, TypeError):
            return getattr(value, "__qualname__", repr(value))
    return str(value)


def parse(
    defines: Any, smem_args: Any, cmem_args: Any, sample: Mapping[str, Any], fail: Callable[[str, str], None]
) -> KernelExtras | None:
    """Check the three spec entries; ``fail(field, message)`` raises.

    ``sample`` is one configuration. Every callable and expression is tried on it. So a typo is
    found before any rank compiles anything. None when the spec uses none of them."""
    if defines is None and smem_args is None and cmem_args is None:
        return None
    extras = KernelExtras()
    if defines is not None:
        if not isinstance(defines, Mapping):
            fail("defines", "must be a dict of name -> value, expression string or function of the configuration")
        for name in defines:
            if not isinstance(name, str) or not name.isidentifier():
                fail("defines", f"{name!r} is not a valid preprocessor name")
        extras.defines = dict(defines)
    if smem_args is not None:
        if not isinstance(smem_args, Mapping) or set(smem_args) != {"size"}:
            fail(
                "smem_args",
                "must be a dict with one key, 'size': bytes as an int, an expression string "
                "or a function of the configuration",
            )
        extras.smem_size = smem_args["size"]
        if isinstance(extras.smem_size, np.integer):
            extras.smem_size = int(extras.smem_size)
    if cmem_args is not None:
        if not isinstance(cmem_args, Mapping) or not cmem_args:
            fail("cmem_args", "must be a dict of constant memory symbol name -> numpy array")
        for name, value in cmem_args.items():
            if not isinstance(name, str) or not name.isidentifier():
                fail("cmem_args", f"{name!r} is not a C identifier naming a __constant__ symbol")
            if not isinstance(value, (np.ndarray, np.generic)) or value.dtype.kind not in "biufc":
                fail("cmem_args", f"{name!r} must be a numeric numpy array or scalar, got {type(value).__name__}")
            extras.cmem[name] = np.ascontiguousarray(value)
    try:
        extras.derive(sample)
    except ValueError as exc:
        fail("defines" if str(exc).startswith("defines") else "smem_args", str(exc))
    return extras
