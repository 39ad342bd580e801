"""What a small gzip prior that expands a thousandfold costs the process that reads it: its size,
what it expands to, and the peak memory of reading it as mpitune does (``read_kt_json``, bounded
by MPITUNE_KT_JSON_MAX_MB) and, with ``--unbounded``, as it was read before the bound (the whole
text, then ``json.loads``).

    .venv/bin/python benchmarks/prior_expansion.py [--gib 1.5] [--unbounded]

Each reading runs in a fresh interpreter, so its peak resident memory is its own.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

BOUNDED = """
import resource, sys, time
from mpitune.errors import UserError
from mpitune.store.measured import read_kt_json
started = time.monotonic()
try:
    read_kt_json(sys.argv[1])
    said = "read"
except UserError as exc:
    said = str(exc)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic() - started, said)
"""

UNBOUNDED = """
import gzip, json, resource, sys, time
started = time.monotonic()
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as fh:
    json.loads(fh.read())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic() - started, "read")
"""


def write_bomb(path: str, gib: float) -> int:
    """A Kernel Tuner cache of one entry followed by ``gib`` GiB of blanks, gzipped; its JSON bytes."""
    head = {"kernel_name": "scale", "device_name": "x", "problem_size": [1], "tune_params_keys": ["STEP"]}
    text = json.dumps({**head, "tune_params": {"STEP": [1]}, "cache": {"1": {"STEP": 1, "time": 1.0}}})
    block = b" " * (16 << 20)
    blocks = int(gib * (1 << 30)) // len(block)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(text[:-1].encode())
        for _ in range(blocks):
            fh.write(block)
        fh.write(b"}")
    return len(text) + blocks * len(block)


def measure(code: str, path: str) -> tuple[float, float, str]:
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout
    rss_kib, seconds, said = out.strip().split(" ", 2)
    return int(rss_kib) / (1 << 20), float(seconds), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.5, help="what the gzip expands to, GiB (default 1.5)")
    parser.add_argument("--unbounded", action="store_true", help="also read it whole, as before the bound")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "prior.json.gz")
        started = time.monotonic()
        expanded = write_bomb(path, args.gib)
        print(
            f"gzip of {os.path.getsize(path) / 1e6:.2f} MB expanding to {expanded / 1e9:.2f} GB "
            f"(written in {time.monotonic() - started:.0f} s)"
        )
        rss_gib, seconds, said = measure(BOUNDED, path)
        print(f"mpitune's read: peak {rss_gib:.2f} GiB resident, {seconds:.1f} s: {said}")
        if args.unbounded:
            rss_gib, seconds, said = measure(UNBOUNDED, path)
            print(f"read whole, as before: peak {rss_gib:.2f} GiB resident, {seconds:.1f} s: {said}")


if __name__ == "__main__":
    main()
