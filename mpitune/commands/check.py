"""``check CACHE``: is the file sound after a crash, and what did the crash cost?

Repairs what a killed writer left (half-written rows of its last batch, a run still marked
"running") unless ``--no-repair``; refuses to touch a file a live run is writing.
"""

from __future__ import annotations

import argparse
import os

HELP = "check a cache file's integrity, repair what a killed run left, say what was in flight"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file")
    p.add_argument("--no-repair", action="store_true", help="only report, change nothing")


def run(args: argparse.Namespace) -> int:
    from mpitune.store.integrity import inspect

    repair = not args.no_repair and _writable(args.cache)
    if not args.no_repair and not repair:
        print(f"{args.cache}: read-only here: checking without repairing")
    found = inspect(args.cache, fix=repair)
    for line in found.repaired:
        print(f"repaired: {line}")
    if found.lost:
        print(f"lost: {found.lost} (not recorded; a rerun measures them)")
    for line in found.problems:
        print(f"problem: {line}")
    print(f"{args.cache}: {found.rows} configurations recorded, "
          f"{'sound' if not found.problems else f'{len(found.problems)} problem(s) that cannot be repaired'}")
    return 1 if found.problems else 0


def _writable(path: str) -> bool:
    """A repair rewrites the file and takes its lock beside it: both must be writable."""
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
