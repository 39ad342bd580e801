"""``export CACHE --format kt-json|t4 --out FILE``: results for Kernel Tuner's ecosystem."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from mpitune.exits import ExitCode

HELP = "write a cache file as a Kernel Tuner JSON cache (replayable in its simulation mode) or T4 results"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mpitune.offline.exchange import EXPORTS

    p.add_argument("cache", help="an mpitune HDF5 file")
    formats = "kt-json: Kernel Tuner cache; t4: T4 results (schema 1.0.0)"
    p.add_argument("--format", required=True, choices=tuple(EXPORTS), help=formats)
    p.add_argument(
        "--out", required=True, metavar="FILE", help="file to write (gzipped if it ends in .gz); - for standard output"
    )


def run(args: argparse.Namespace) -> int:
    from mpitune.offline.exchange import EXPORTS

    write = EXPORTS[args.format]
    if args.out != "-":
        count = write(args.cache, args.out)
        print(f"mpitune: wrote {count} configurations to {args.out} ({args.format})")
        return ExitCode.OK
    # The exporters write files; standard output gets the file's text and nothing else, for a pipe.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "export.json")
        write(args.cache, path)
        with open(path, "rb") as fh:
            sys.stdout.flush()
            sys.stdout.buffer.write(fh.read())
    return ExitCode.OK
