"""``check CACHE``: is the file sound after a crash, and what did the crash cost?

Repairs what a killed writer left, unless ``--no-repair``: half-written rows of its last batch,
a run still marked "running". It refuses to touch a file a live run is writing. A damaged file
has bytes that do not read back. It is never changed (exit code 2), unless ``--salvage`` is given.
Salvage copies what is readable into a new file in its place and keeps the damaged one beside it.
"""

from __future__ import annotations

import argparse
import os

from mpitune.errors import UserError
from mpitune.exits import ExitCode

HELP = "check a cache file's integrity, repair what a killed run left, say what was in flight"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file")
    p.add_argument("--no-repair", action="store_true", help="only report, change nothing")
    p.add_argument(
        "--salvage",
        action="store_true",
        help="if damaged: keep it as CACHE.damaged and write what is readable to CACHE",
    )


def run(args: argparse.Namespace) -> int:
    from mpitune.store.integrity import inspect
    from mpitune.store.salvage import salvage

    if not os.path.exists(args.cache):  # not "damaged": there is nothing to check, or to salvage
        raise UserError(f"{args.cache}: no such file")
    if os.path.isdir(args.cache):
        raise UserError(f"{args.cache}: is a directory, not a results file")
    repair = not args.no_repair and _writable(args.cache)
    if not args.no_repair and not repair:
        print(f"{args.cache}: read-only here: checking without repairing")
    found = inspect(args.cache, fix=repair)
    found.version.refuse_newer(args.cache, "not checked, nothing changed; check it with the mpitune that wrote it")
    if found.problems and args.salvage:
        saved = salvage(args.cache)
        print(
            f"salvaged: {saved.rows} configuration(s) kept in {args.cache}, {saved.lost} row(s) unreadable; "
            f"the damaged file is {saved.backup}"
        )
        return ExitCode.OK
    for line in found.repaired:
        print(f"{'repaired' if found.fixed else 'needs repair'}: {line}")
    if found.lost:
        print(f"lost: {found.lost} (not recorded; a rerun measures them)")
    for line in found.problems:
        print(f"problem: {line}")
    if found.problems:
        raise UserError(
            f"{args.cache}: damaged, {len(found.problems)} problem(s); nothing was changed "
            f"(--salvage keeps what is readable)"
        )
    pending = found.repaired and not found.fixed
    print(f"{args.cache}: {found.rows} configurations recorded, {'sound once repaired' if pending else 'sound'}")
    return ExitCode.FAILED if pending else ExitCode.OK


def _writable(path: str) -> bool:
    """A repair rewrites the file in place and puts its partial copy beside it. Both must be writable."""
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
