"""``watch CACHE``: follow a running job's file from a login node, until the run ends.

Reads the file as an HDF5 SWMR reader, so it never disturbs the writer. A run whose writer is
gone while its row still says "running" was killed, and watch says so. ``--html`` serves the
HTML report instead, on loopback. It is refreshed while the run goes on (offline/html/server.py).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import TYPE_CHECKING

from mpitune.errors import number_flag
from mpitune.exits import ExitCode

if TYPE_CHECKING:
    from mpitune.store.reader import CacheData

MAX_PORT = 65535
HELP = "print the progress of a running job's cache file every few seconds until the run ends"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", help="an mpitune HDF5 file, while its run goes on")
    p.add_argument(
        "--interval",
        type=number_flag(),
        default=5.0,
        metavar="S",
        help="seconds between lines, or between the live page's refreshes (default 5)",
    )
    p.add_argument("--html", action="store_true", help="serve the HTML report, refreshed as the run goes on")
    p.add_argument("--host", default="127.0.0.1", help="with --html: the address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=_port, default=8050, help="with --html: the port, 0 to 65535 (default 8050; 0 picks a free one)"
    )


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535, checked here: the socket would raise OverflowError."""
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) > MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to {MAX_PORT}, got {text!r}")
    return int(text)


def progress(data: CacheData) -> str:
    """One line: the newest run's count, rate and best, and the file's overall best."""
    runs, results = data.runs, data.results
    if not len(runs):
        return "no run recorded yet"
    run = runs[-1]
    mine = results[results["run"] == run["run"]]
    ok = results[results["status"] == "ok"]
    elapsed_s = time.time() - run["started_unix"] if run["status"] == "running" else run["wall_s"]
    line = (
        f"run {run['run']} ({run['status']}): {len(mine)} measured, {len(results)}/{run['space_size']} "
        f"recorded, {len(mine) - int((mine['status'] == 'ok').sum())} failed"
    )
    if elapsed_s and not math.isnan(elapsed_s) and elapsed_s > 0:
        line += f", {len(mine) / elapsed_s:.3g} configs/s over {elapsed_s:.0f} s"
    if len(ok):
        best = ok[ok["time_ms"].argmin()]
        config = ", ".join(f"{n}={best[n]}" for n in data.param_names)
        line += f"; best {best['time_ms']:.4g} ms ({config})"
    return line


def run(args: argparse.Namespace) -> int:
    if args.html:
        from mpitune.offline.html.server import serve

        return serve(args.cache, args.host, args.port, args.interval)
    from mpitune.store.lock import locking, writer_alive
    from mpitune.store.reader import read

    # With locking off (docs/reliability.md) no writer can be seen: watch until the run's row ends.
    seen = locking().on
    while True:
        data = read(args.cache)
        print(f"mpitune: {progress(data)}", flush=True)
        runs = data.runs
        running = len(runs) and runs[-1]["status"] == "running"
        if not running:
            return ExitCode.OK
        # A run that ended between the read and the look at its lock has its row ended: read again.
        if seen and not writer_alive(args.cache) and read(args.cache).runs[-1]["status"] == "running":
            print(
                "mpitune: no process is writing this file any more: the run was killed; rerun it to resume", flush=True
            )
            return ExitCode.FAILED
        time.sleep(args.interval)
