"""What racing saves on measured data: every cache replayed with full timing and with racing.

    python benchmarks/racing.py CACHE_DIR [--strategy brute_force] [--max-fevals N] [--rule majority]

Each Kernel Tuner cache (``*.json``, ``*.json.gz``) in CACHE_DIR is replayed twice in this
process, on one rank, through the real loop (Manager, replay backend, HDF5 file): once with
``racing=False`` and once with racing on, by the rule ``--rule`` names (model/judging/racing.py). The
replay backend races the recorded per-iteration times in the order they were measured and spends
the simulated benchmark time of the launches it made only. Prints, per cache, the timed launches
and the simulated benchmark seconds of both, what racing saved, the configurations it stopped,
and whether the best configuration (and its median) is the same; then the totals. These are
replays of measured data: the saving on a GPU also depends on what compiling and verifying cost
there.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import shlex
import sys
import tempfile

import numpy as np

from mpitune.model.judging.racing import RaceRule
from mpitune.scheduling.run import tune
from mpitune.scheduling.transport import LocalTransport
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured
from mpitune.store.reader import read


def replayed(source: str, out: str, racing: bool | str, strategy: str, max_fevals: int | None) -> dict:
    """One replay's figures, read back from the file it wrote."""

    def load():
        given = Overrides(cache_path=out, racing=racing, max_fevals=max_fevals)
        return replay_problem(measured.load(source), given, strategy)

    with contextlib.redirect_stdout(io.StringIO()):
        code = tune(load, "benchmarks/racing.py", transport=LocalTransport())
    if code != 0:
        raise SystemExit(f"replaying {source} exited with {code}")
    res = read(out).results
    ok = res[res["status"] == "ok"]
    best = ok[np.argmin(ok["time_ms"])]
    return {
        "launches": int(ok["launches"].sum()),
        "benchmark_s": float(res["benchmark_s"].sum()),
        "raced": int(ok["raced"].sum()),
        "configs": len(res),
        "best": int(best["config_id"]),
        "best_ms": float(best["time_ms"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches")
    parser.add_argument("--strategy", default="brute_force")
    parser.add_argument("--max-fevals", type=int, default=None)
    parser.add_argument("--rule", choices=[rule.value for rule in RaceRule], default=RaceRule.MAJORITY.value)
    args = parser.parse_args(argv)
    sources = sorted(glob.glob(os.path.join(args.caches, "*.json*")))
    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print("| cache | configs | timed launches full / raced | benchmark s full / raced | saved | stopped | same best |")
    print("|---|---|---|---|---|---|---|")
    totals = np.zeros(4)
    with tempfile.TemporaryDirectory(prefix="mpitune-racing-") as tmp:
        for source in sources:
            name = os.path.basename(source).split(".")[0]
            full = replayed(source, os.path.join(tmp, f"{name}.full.h5"), False, args.strategy, args.max_fevals)
            fast = replayed(source, os.path.join(tmp, f"{name}.raced.h5"), args.rule, args.strategy, args.max_fevals)
            same = full["best"] == fast["best"] and full["best_ms"] == fast["best_ms"]
            saved = 1 - fast["benchmark_s"] / full["benchmark_s"]
            print(
                f"| {name} | {full['configs']} | {full['launches']} / {fast['launches']} | "
                f"{full['benchmark_s']:.1f} / {fast['benchmark_s']:.1f} | {saved:.0%} | {fast['raced']} | "
                f"{'yes' if same else 'NO'} |"
            )
            totals += (full["launches"], fast["launches"], full["benchmark_s"], fast["benchmark_s"])
    print(
        f"| all | | {totals[0]:.0f} / {totals[1]:.0f} | {totals[2]:.1f} / {totals[3]:.1f} | "
        f"{1 - totals[3] / totals[2]:.0%} | | |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
