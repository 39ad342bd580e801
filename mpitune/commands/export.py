"""``export CACHE... --format FORMAT --out FILE``: results for Kernel Tuner's ecosystem, and a
header of each device's best configuration."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mpitune.errors import UserError
from mpitune.exits import ExitCode

HELP = (
    "write cache files as a Kernel Tuner JSON cache (replayable in its simulation mode), T4 results, "
    "Kernel Tuner's results file, or a header of each device's best configuration"
)


@dataclass(frozen=True)
class Format:
    """One format of ``--format``: its writer and whether it takes several inputs.

    The writer takes (input paths, output path) and returns how many ``unit``s it wrote.
    A format with several inputs takes one per device and problem size."""

    write: Callable[[Sequence[str], str], int]
    unit: str
    several: bool
    meaning: str


def _one(write: Callable[[str, str], int]) -> Callable[[Sequence[str], str], int]:
    return lambda paths, out: write(paths[0], out)


def formats() -> dict[str, Format]:
    """The formats, by name (imported here: ``--help`` of the other verbs loads none of them)."""
    from mpitune.offline.exchange import export_kt_json, export_t4
    from mpitune.offline.integration.from_files import export_header, export_kt_results

    return {
        "kt-json": Format(_one(export_kt_json), "configurations", False, "Kernel Tuner cache"),
        "t4": Format(_one(export_t4), "configurations", False, "T4 results (schema 1.0.0)"),
        "kt-results": Format(
            export_kt_results, "entries", True, "Kernel Tuner's results file, a FILE per device and size"
        ),
        "header": Format(export_header, "device target(s)", True, "header: #if defined(TARGET_<device>) per device"),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    known = formats()
    p.add_argument("cache", nargs="+", help="mpitune HDF5 file(s): several for kt-results and header")
    p.add_argument(
        "--format", required=True, choices=tuple(known), help="; ".join(f"{k}: {f.meaning}" for k, f in known.items())
    )
    p.add_argument(
        "--out", required=True, metavar="FILE", help="file to write (gzipped if it ends in .gz); - for standard output"
    )


def run(args: argparse.Namespace) -> int:
    chosen = formats()[args.format]
    paths: list[str] = list(args.cache)
    if len(paths) > 1 and not chosen.several:
        raise UserError(f"--format {args.format} writes one file: give one cache, not {len(paths)}")
    if args.out != "-":
        count = chosen.write(paths, args.out)
        print(f"mpitune: wrote {count} {chosen.unit} to {args.out} ({args.format})")
        return ExitCode.OK
    # The exporters write files; standard output gets the file's text and nothing else, for a pipe.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "export.json")
        chosen.write(paths, path)
        with open(path, "rb") as fh:
            sys.stdout.flush()
            sys.stdout.buffer.write(fh.read())
    return ExitCode.OK
