"""``report CACHE``: a readable summary of a cache file, one JSON object, or an HTML page (``--html``)."""

from __future__ import annotations

import argparse

from mpitune.exits import ExitCode

HELP = "summarise a cache file: best configurations, statuses, where each rank's time went"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--top", type=int, default=5, metavar="K", help="show the K best configurations")
    p.add_argument(
        "--html", metavar="OUT.html", help="write an interactive, self-contained HTML report instead (needs plotly)"
    )


def run(args: argparse.Namespace) -> int:
    if args.html:
        from mpitune.offline.html.page import write_report

        print(write_report(args.cache, args.html))
        return ExitCode.OK
    from mpitune.offline.report import render

    print(render(args.cache, as_json=args.json, top=args.top))
    return ExitCode.OK
