"""Confirmation on a loaded device (issue 29, item 6): a real 2-rank C run, each rank pinned to a
core of its own, with CPU hogs on rank 1's core. Calibration must flag rank 1 (and only it), and
the confirmed best must be the one an unloaded run of the same spec confirms, or tied with it.

What makes this hold on a machine busy with other work (CI's, or other tests'):

- The hogs are several processes, each in a session of its own. Where the kernel groups tasks by
  session (autogroup, on by default on desktop and many server kernels) the CPU is shared fairly
  between sessions, not tasks: hogs of one session would take half the core whatever their
  number. Five sessions leave rank 1 about a sixth of its core.
- Other load is not pinned, so the kernel moves it to the core the hogs leave less loaded: rank
  0's, until both cores hold as many busy sessions. Other load thus slows rank 0 more than rank 1,
  the opposite of what the test looks for, and with as many busy sessions as there are hogs it
  hides them altogether: one hog is not enough. Five keep rank 1 clearly the slower with two
  busy neighbours besides (measured: its factor 1.45 times rank 0's, 2 to 4 times with less).
- A launch lasts several milliseconds, longer than the scheduler's slice: a launch shorter than
  that mostly runs between the hog's turns and comes out as fast as an unloaded one (measured:
  a 0.6 ms launch's median did not move under a hog), so the factor would not show the load.
- The best configuration does two thirds of the work of the next (N=2 against 3): no noise
  or calibration error makes it lose. The two configurations that do the same work (``TWIN``)
  exercise ties among the candidates without making the winner a draw.

Only ratios are asserted, never times."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import mpi_env, mpiexec, recorded_ids, report_json

log = logging.getLogger(__name__)

LOOP_C = r"""
/* N units of dependent integer work (a linear congruential chain, which gcc does not shorten):
   a launch takes N times a unit's time on any CPU. TWIN changes nothing but the configuration. */
void loop(unsigned *out, int n)
{
    unsigned x = (unsigned)n + TWIN * 0u;
    for (long i = 0; i < (long)N * UNIT; i++)
        x = x * 1664525u + 1013904223u;
    out[0] = x;
}
"""

# UNIT: about 2.5 ms on a 3 GHz core, so the best (N=2) launches for about 5 ms. N=6 is more than
# twice the best and no candidate: four candidates, the twins among them.
LOOP_SPEC = """
import numpy as np

lang = "C"
kernel_name = "loop"
kernel_source = "loop.c"
arguments = [np.zeros(1, np.uint32), np.int32(1)]
tune_params = {"N": [2, 3, 4, 6], "TWIN": [0, 1], "UNIT": [2000000]}
restrictions = ["TWIN == 0 or N == 3"]
iterations = 3
"""
SPACE_SIZE = 5
HOGS = 5  # processes, a session each, on rank 1's core, besides one per task the machine already runs


def hogs_for_load() -> int:
    """``HOGS`` more than the machine's busy tasks (its load average over the last minute, at most
    11 of them counted): the kernel spreads unpinned load over both cores until they hold as many
    busy sessions, so rank 1's core must hold more hogs than there is other load for rank 1 to
    stay the slower one (under a load of 7 on two cores, five hogs left rank 1 the faster)."""
    return HOGS + min(11, round(os.getloadavg()[0]))


MIN_RATIO = 1.2  # rank 1's factor over rank 0's: up to 6 (a sixth of a core), less as other load joins rank 0

# Each rank runs mpitune under taskset, on the core its world rank (MPICH's PMI_RANK, Open MPI's
# OMPI_COMM_WORLD_RANK) picks: $0 is the Python, "$@" mpitune's arguments.
PINNED = """
case "${{PMI_RANK:-$OMPI_COMM_WORLD_RANK}}" in
0) core={0} ;;
1) core={1} ;;
*) echo "no world rank 0 or 1 in the environment" >&2; exit 3 ;;
esac
exec taskset -c "$core" "$0" -m mpitune "$@"
"""

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def two_cores() -> tuple[int, int]:
    """The first two cores this process may run on; skips where there are fewer, or no taskset."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform: the ranks cannot be pinned")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip(f"one core only ({cores}): the ranks need a core each, one of them hogged")
    if shutil.which("taskset") is None:
        pytest.skip("no taskset (util-linux) to pin the ranks")
    return cores[0], cores[1]


@contextlib.contextmanager
def hogging(core: int, count: int = HOGS) -> Iterator[None]:
    """``count`` busy loops pinned to ``core`` for the duration, each in a session of its own (see
    the module docstring); all ended and reaped however the block ends."""
    hogs: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(core)], start_new_session=True))
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


def pinned_run(directory: Path, cores: tuple[int, int], name: str) -> dict:
    """A 2-rank run of the spec in ``directory``, rank r on cores[r]; its ``report --json``."""
    cache = directory / f"{name}.h5"
    cmd = [*mpiexec(), "-n", "2", "sh", "-c", PINNED.format(*cores), sys.executable]
    cmd += [str(directory / "spec.py"), "--cache", str(cache)]
    proc = subprocess.run(cmd, cwd=directory, env=mpi_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(recorded_ids(cache)) == list(range(SPACE_SIZE))  # the search's rows, none added
    report = report_json(cache)
    assert report["space_size"] == SPACE_SIZE and report["confirmation"] is not None, proc.stdout
    return report


def same_or_tied(a: dict, b: dict) -> bool:
    """Whether two confirmations name one winner, or one's winner is tied with the other's."""
    return a["winner"] == b["winner"] or a["winner"] in b["tied"] or b["winner"] in a["tied"]


def test_a_hogged_rank_is_flagged_and_the_confirmed_best_is_the_unloaded_ones(tmp_path):
    cores = two_cores()
    (tmp_path / "loop.c").write_text(LOOP_C)
    (tmp_path / "spec.py").write_text(textwrap.dedent(LOOP_SPEC))

    unloaded = pinned_run(tmp_path, cores, "unloaded")
    with hogging(cores[1], hogs_for_load()):
        loaded = pinned_run(tmp_path, cores, "loaded")

    factors = {d["rank"]: d for d in loaded["calibration"]}
    ratio = factors[1]["factor"] / factors[0]["factor"]
    log.info(
        "factors unloaded %s, loaded %s: rank 1 / rank 0 = %.3f",
        [round(d["factor"], 4) for d in unloaded["calibration"]],
        [round(d["factor"], 4) for d in loaded["calibration"]],
        ratio,
    )
    assert sorted(factors) == [0, 1], loaded["calibration"]
    assert factors[1]["flagged"] and not factors[0]["flagged"], loaded["calibration"]
    assert ratio > MIN_RATIO, loaded["calibration"]
    assert same_or_tied(loaded["confirmation"], unloaded["confirmation"]), (loaded, unloaded)
