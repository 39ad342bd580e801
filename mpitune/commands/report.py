"""``report CACHE``: a readable summary of a cache file, one JSON object or an HTML page.

``report CACHE CACHE ...`` shows one kernel's files of several device models side by side
(offline/across_models.py); ``--html`` writes that as a page (offline/html/across.py).
"""

from __future__ import annotations

import argparse

from mpitune.exits import ExitCode

HELP = (
    "summarise a cache file: best configurations, statuses, where each rank's time went; "
    "several files of one kernel on other device models: each model's best and a portable choice"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "cache", nargs="+", help="an mpitune HDF5 file; several: one per device model, compared side by side"
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--top", type=int, default=5, metavar="K", help="show the K best configurations")
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a self-contained HTML page instead: of one file, an interactive report (needs plotly); "
        "of several, their comparison as tables",
    )


def run(args: argparse.Namespace) -> int:
    if len(args.cache) > 1:
        if args.html:
            from mpitune.offline.html.across import write_across

            print(write_across(args.cache, args.html))
            return ExitCode.OK
        from mpitune.offline.across_models import render_across

        print(render_across(args.cache, as_json=args.json))
        return ExitCode.OK
    if args.html:
        from mpitune.offline.html.page import write_report

        print(write_report(args.cache[0], args.html))
        return ExitCode.OK
    from mpitune.offline.report import render

    print(render(args.cache[0], as_json=args.json, top=args.top))
    return ExitCode.OK
