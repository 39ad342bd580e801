"""``plot CACHE --out DIR``: PNG pictures of a cache file (needs matplotlib)."""

from __future__ import annotations

import argparse

from mpitune.exits import ExitCode

HELP = "draw PNGs of a cache file: convergence, per-rank timeline, distribution, each parameter, the Pareto front"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mpitune.offline.plots import CHOICES

    p.add_argument("cache", help="an mpitune HDF5 file (a running job's file works too)")
    p.add_argument("--out", default=".", metavar="DIR", help="folder for the PNG files (default: here)")
    p.add_argument("--only", nargs="+", choices=CHOICES, metavar="PLOT", help=f"draw only these: {', '.join(CHOICES)}")
    p.add_argument("--dpi", type=int, default=100, help="resolution of the PNG files (default 100)")


def run(args: argparse.Namespace) -> int:
    from mpitune.offline.plots import plot

    for path in plot(args.cache, args.out, tuple(args.only) if args.only else None, args.dpi):
        print(path)
    return ExitCode.OK
