"""What a spec file names, read from its syntax without running it.

Running a spec may take seconds: it may compute a reference answer. It runs on rank 0 only. Each
rank must know before which backend to start its worker process for (scheduling/before_mpi.py).
That is read here from the file's top-level assignments. It is a guess: once the spec has run,
its checks decide.
"""

from __future__ import annotations

import ast

from mpitune.spec.kernel_tuner import DEFAULTS


def named_lang(path: str) -> str | None:
    """The ``lang`` a spec file names, read from its syntax; Kernel Tuner's default if it names none.

    Each rank can then start its worker for that backend while rank 0 runs the spec. None where
    only running it would tell: it computes or imports ``lang``, or replays measured data. None
    too where the file cannot be read. Then no worker is started early."""
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
