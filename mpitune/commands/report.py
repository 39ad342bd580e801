"""``report CACHE``: a readable summary of a cache file, or one JSON object."""

from __future__ import annotations

import argparse

HELP = "summarise a cache file: best configurations, statuses, where each rank's time went"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--top", type=int, default=5, metavar="K", help="show the K best configurations")


def run(args: argparse.Namespace) -> int:
    from mpitune.offline.report import render

    print(render(args.cache, as_json=args.json, top=args.top))
    return 0
