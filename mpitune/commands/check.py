"""``check CACHE``: is the file sound after a crash, and what did the crash cost?

Repairs what a killed writer left (half-written rows of its last batch, a run still marked
"running") unless ``--no-repair``; refuses to touch a file a live run is writing.
"""

from __future__ import annotations

import argparse

HELP = "check a cache file's integrity, repair what a killed run left, say what was in flight"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file")
    p.add_argument("--no-repair", action="store_true", help="only report, change nothing")


def run(args: argparse.Namespace) -> int:
    import h5py

    from ..cache import open_for_reading, writer_alive
    from ..errors import UserError
    from ..h5repair import clear_write_flags
    from ..integrity import findings, in_flight, repair

    if writer_alive(args.cache):
        raise UserError(f"{args.cache}: a run is writing it now; check it when the run has ended")
    repaired: list[str] = []
    try:
        if args.no_repair:
            f = open_for_reading(args.cache)
        else:
            if clear_write_flags(args.cache):
                repaired.append("cleared the open-for-write mark a killed writer left")
            f = h5py.File(args.cache, "a", libver="latest")
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(f"{args.cache}: not a readable HDF5 file ({exc})") from None
    with f:
        lost = in_flight(f)
        if not args.no_repair:
            repaired += repair(f)
        problems = findings(f)
        rows = len(f["results"]) if "results" in f else 0
    for line in repaired:
        print(f"repaired: {line}")
    if lost:
        print(f"lost: {lost} (not recorded; a rerun measures them)")
    for line in problems:
        print(f"problem: {line}")
    print(f"{args.cache}: {rows} configurations recorded, "
          f"{'sound' if not problems else f'{len(problems)} problem(s) that cannot be repaired'}")
    return 1 if problems else 0
