"""The verbs that read a results file, one module each: no MPI, no GPU.

The verbs that tune live in cli/; cli/verbs.py lists every verb.

A verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
The module name is the verb; a trailing underscore is dropped, so ``import_`` is ``import``.
A ``UserError`` raised by ``run`` becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def verbs() -> dict[str, str]:
    """verb -> module name, without importing the modules."""
    return {m.name.rstrip("_"): m.name for m in pkgutil.iter_modules(__path__)}


def module_of(verb: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{verbs()[verb]}")
