"""``import KT_CACHE.json[.gz] --out FILE.h5``: a Kernel Tuner cache as an mpitune file."""

from __future__ import annotations

import argparse
import shlex

from mpitune.exits import ExitCode

HELP = "turn a Kernel Tuner JSON cache (plain or .gz) into an mpitune HDF5 file for report, plot and replay"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kt_cache", metavar="KT_CACHE", help="a Kernel Tuner cache, .json or .json.gz")
    p.add_argument("--out", required=True, metavar="FILE.h5", help="the mpitune file to create")


def run(args: argparse.Namespace) -> int:
    from mpitune.offline.kt_import import import_kt

    command = shlex.join(["python", "-m", "mpitune", "import", args.kt_cache, "--out", args.out])
    done = import_kt(args.kt_cache, args.out, command)
    print(
        f"mpitune: imported {done.configs} configurations of {done.kernel} on {done.device} "
        f"({done.runs} session(s)) into {args.out}"
    )
    return ExitCode.OK
