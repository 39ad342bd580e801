"""A C/C++/CUDA header with each device's configuration, from a results file.

Compile with ``-DTARGET_<device>`` for that device's configuration. The device's name is as the
results file keeps it. Compile with none for the default (choice.py says which).

Kernel Tuner's ``create_device_targets`` writes the same blocks, but as ``#elif TARGET_x``. Here
every branch is ``defined(TARGET_x)``. So a target defined empty or as 0 still picks its block.
As in Kernel Tuner, the whole is skipped where ``kernel_tuner`` is defined. While a tuner compiles
the kernel, the configuration is the tuner's.

A comment above each block says which file, device and problem size it came from. It gives the
value there, whether a confirmation named it, and the configurations tied with it. The header is
C code made from data. Every name and value is checked to be a plain identifier, number or word.
Comments can hold nothing that ends them. So no results file can put code in it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from mpitune import __version__
from mpitune.offline.integration.choice import DefaultChoice, config_key, default_choice, device_choice
from mpitune.offline.integration.results_file import Entry, ResultsFile, ResultsFileError, device_label

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WORD = re.compile(r"[A-Za-z0-9_.+\-]+( [A-Za-z0-9_.+\-]+)*\Z")  # float, unsigned int, 1e-3


def macro_value(name: str, value: Any) -> str:
    """A parameter's value as the text of its ``#define``.

    A ``ResultsFileError`` for one that is no number, boolean or plain word."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, str) and _WORD.match(value):
        return value
    raise ResultsFileError(f"{name}: the value {value!r} cannot be a #define (a number, true/false or a plain word)")


def target_macro(device: str) -> str:
    """The macro that picks ``device``'s block."""
    return f"TARGET_{device_label(device)}"


def _comment(text: str) -> str:
    """Text safe inside ``/* */``: printable, and never ending the comment."""
    printable = "".join(c if c.isprintable() else "?" for c in text)
    return printable.replace("*/", "* /").replace("/*", "/ *")


def _config(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _defines(params: Mapping[str, Any]) -> list[str]:
    for name in params:
        if not _IDENTIFIER.match(name):
            raise ResultsFileError(f"the parameter name {name!r} cannot be a #define")
    return [f"#define {name} {macro_value(name, value)}" for name, value in params.items()]


def _provenance(results: ResultsFile, device: str, chosen: Mapping[str, Any]) -> list[str]:
    """One comment line per block of ``device``.

    It says where the block came from and what it says of ``chosen``."""
    names = results.tunable_parameters
    key = config_key(chosen, names)
    lines = []
    for (dev, size), entries in results.blocks().items():
        if dev != device:
            continue
        source = next((e.source for e in entries if e.source), "")
        line = f"{dev}, problem size {size}" + (f", from {source}" if source else "")
        mine: Entry | None = next((e for e in entries if config_key(e.params, names) == key), None)
        if mine is None:
            line += f": not among the {len(entries)} kept for it"
        else:
            unit = " ms" if results.objective == "time" else ""
            line += ": " + ("confirmed winner, " if mine.confirmed else "") + f"{results.objective} {mine.value:.6g}"
            if mine.interval_ms is not None:
                line += f" [{mine.interval_ms[0]:.6g}, {mine.interval_ms[1]:.6g}]"
            line += unit
            if mine.tied:
                line += f"; tied with it ({len(mine.tied)}): " + "; ".join(_config(t) for t in mine.tied)
            elif mine.confirmed:
                line += "; no candidate tied with it"
        lines.append(f"/* {_comment(line)} */")
    if len(lines) > 1:
        rule = "the configuration kept for most, then the best sum (Kernel Tuner's rule)"
        lines.insert(0, f"/* {len(lines)} problem sizes: {rule} */")
    return lines


def _default_comment(choice: DefaultChoice, first_device: str) -> str:
    if choice.worst_ratio is None:
        why = f"no configuration is kept for every device and problem size: {first_device}'s"
    else:
        why = (
            f"of the {choice.common} configuration(s) kept for every one of the {choice.blocks} device and "
            f"problem size blocks, the one whose worst ratio to a block's best is smallest ({choice.worst_ratio:.4g})"
        )
    return f"/* default: {_comment(why)}: {_comment(_config(choice.params))} */"


def header_text(results: ResultsFile) -> str:
    """The header for every device of ``results``, with the default."""
    devices = results.devices()
    if not devices:
        raise ResultsFileError("the results hold no entries: no device to write a target for")
    macros = [target_macro(d) for d in devices]
    doubled = next((m for m in macros if macros.count(m) > 1), None)
    if doubled:
        raise ResultsFileError(f"two devices would both be {doubled}")
    lines = [
        f"/* Written by mpitune {__version__} from tuning results of {_comment(results.kernel_name)}; "
        "do not edit by hand. */",
        f"/* Objective: {_comment(results.objective)}, "
        + ("higher" if results.higher_is_better else "lower")
        + " is better. Compile with -DTARGET_<device> for a device's configuration, with none for the default. */",
        "#pragma once",
        "#ifndef kernel_tuner /* a tuner compiling the kernel gives the configuration itself */",
    ]
    for i, (device, macro) in enumerate(zip(devices, macros)):
        chosen = dict(device_choice(results, device).params)
        lines.append(f"{'#if' if i == 0 else '#elif'} defined({macro})")
        lines += _provenance(results, device, chosen) + _defines(chosen)
    default = default_choice(results)
    lines += ["#else", _default_comment(default, devices[0])] + _defines(default.params)
    lines += ["#endif /* targets */", "#endif /* kernel_tuner */", ""]
    return "\n".join(lines)
