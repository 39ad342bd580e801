"""What a spec file names, read from its syntax without running it.

Running a spec may take seconds (it may compute a reference answer) and happens on rank 0
only; what a rank needs to know before (which backend to start its worker process for, see
scheduling/before_mpi.py) is read here from the file's top-level assignments instead. A guess:
the spec's checks, once it has run, decide.
"""

from __future__ import annotations

import ast

from mpitune.spec.kernel_tuner import DEFAULTS


def named_lang(path: str) -> str | None:
    """The ``lang`` a spec file names, read from its syntax without running it (Kernel Tuner's
    default when it assigns none), so that each rank can start its worker for that backend
    while rank 0 runs the spec; None when only running it would tell (it computes or imports
    ``lang``, or replays measured data) or the file cannot be read: no worker is started early."""
    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    lang: str | None = DEFAULTS["lang"]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        for name in (t.id for t in targets if isinstance(t, ast.Name)):
            constant = value.value if isinstance(value, ast.Constant) else None
            if name == "simulation_mode" and constant is not False:
                return None
            if name == "lang":
                lang = constant if isinstance(constant, str) else None
    return lang
