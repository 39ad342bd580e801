"""Issue 41, class 3: a stop during the confirmation. Slurm's SIGTERM comes before the time
limit, which is when the confirmation runs: the ranks stop between two launches, rank 0 keeps
every launch made with what is still owed, and the same command makes only what is owed and
names the winner that the file then names too. A disk that fills during the confirmation leaves
a file whose report says what it holds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
from conftest import mpi_env, mpitune, spin_c, start_mpitune
from test_disk import fill, one_error_line, small_disk  # noqa: F401 (a fixture)

from mpitune.exits import ExitCode

# Eight configurations of the same kernel, each 0.2 s a launch: all are candidates, and the
# confirmation (8 candidates x 5 rounds on each rank) launches for 8 s on every rank.
SPEC = """
import numpy as np
n = 16
lang = "C"
kernel_name = "spin"
kernel_source = "spin.c"
arguments = [np.zeros(n, np.float32), np.int32(n)]
answer = [np.ones(n, np.float32), None]
tune_params = {"VARIANT": list(range(8))}
iterations = 3
strategy = "brute_force"
"""


def _searched(directory: Path) -> Path:
    """A file whose search is done, unconfirmed: the next run with --confirm starts with it."""
    (directory / "spin.c").write_text(spin_c(200))
    (directory / "spec.py").write_text(SPEC)
    first = mpitune(2, ["spec.py", "--confirm", "0"], directory, timeout=180)
    assert first.returncode == 0, first.stderr
    return directory / "spec.h5"


def _confirming(directory: Path) -> subprocess.Popen:
    """The run that confirms, once its log says the confirmation went out."""
    job = start_mpitune(2, ["spec.py", "--confirm", "8", "-v"], directory)
    assert job.stderr is not None
    for line in job.stderr:
        if re.search(r"confirming \d+ candidates: 5 round\(s\) on each of 2 rank\(s\)", line):
            return job
    raise AssertionError(f"the run ended before it confirmed: {job.communicate(timeout=60)}")


def _report(cache: Path) -> tuple[str, dict]:
    command = [sys.executable, "-m", "mpitune", "report", str(cache)]
    text = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    data = subprocess.run([*command, "--json"], capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert data.returncode == 0, data.stderr
    return text.stdout, json.loads(data.stdout)


def _purposes(cache: Path) -> dict[str, int]:
    with h5py.File(cache, "r") as f:
        purposes = [p.decode() for p in f["retimed"]["purpose"]]
    return {p: purposes.count(p) for p in set(purposes)}


def _best_line_names_the_winner(out: str, summary: dict) -> None:
    winner = summary["confirmation"]["winner"]
    assert f"mpitune: best: {summary['confirmation']['winner_ms']:.4g} ms (VARIANT={winner['VARIANT']})" in out, out


def test_sigterm_during_the_confirmation_keeps_what_was_made_and_the_rerun_makes_only_the_rest(tmp_path):
    cache = _searched(tmp_path)
    job = _confirming(tmp_path)
    time.sleep(6.0)  # the candidates compile, then launch for 8 s a rank
    started = time.monotonic()
    pids = subprocess.run(["pgrep", "-f", "mpitune spec.py"], capture_output=True, text=True).stdout.split()
    for pid in map(int, pids):  # as Slurm signals a step: every rank, rank 0 included
        if pid != job.pid and os.readlink(f"/proc/{pid}/cwd") == str(tmp_path):
            os.kill(pid, signal.SIGTERM)
    out, err = job.communicate(timeout=60)
    took = time.monotonic() - started
    assert job.returncode == ExitCode.RESUMABLE, err
    assert "Traceback" not in err
    # Before, the ranks went on with every round (8 s) and the launches were thrown away.
    assert took < 6, took
    kept = _purposes(cache)
    assert kept["confirm"] > 0 and kept["unmade"] > 0, kept  # some launches made, some owed
    candidates = (kept["confirm"] + kept["unmade"]) // (5 * 2)
    assert kept["confirm"] + kept["unmade"] == candidates * 5 * 2
    assert f"confirmation cut short by the stop: {kept['confirm']} launches made and kept" in out
    text, summary = _report(cache)
    assert summary["confirmation"] is None and summary["confirmation_cost"]["owed"] == kept["unmade"]
    assert f"{kept['confirm']} launches made and kept, {kept['unmade']} still owed" in text

    resumed = mpitune(2, ["spec.py", "--confirm", "8"], tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert f"with run 1's {kept['confirm']} launches" in resumed.stdout
    with h5py.File(cache, "r") as f:
        retimed = f["retimed"][...]
    made = retimed[retimed["run"] == 2]
    assert len(made) < candidates * 5 * 2  # only what was owed, in whole rounds
    assert (retimed[retimed["run"] == 1]["purpose"] == b"confirm").sum() == kept["confirm"]  # kept as made
    text, summary = _report(cache)
    assert summary["confirmation_cost"]["owed"] == 0
    _best_line_names_the_winner(resumed.stdout, summary)
    again = mpitune(2, ["spec.py", "--confirm", "8"], tmp_path, timeout=180)
    assert again.returncode == 0 and "confirm" not in again.stdout.replace("--confirm", ""), again.stdout
    _best_line_names_the_winner(again.stdout, summary)  # not timed again: the file's winner


def test_a_disk_full_during_the_confirmation_leaves_a_report_that_says_what_it_holds(small_disk):  # noqa: F811
    cache = _searched(small_disk)
    job = _confirming(small_disk)
    filler = fill(small_disk)
    _, err = job.communicate(timeout=120)
    assert job.returncode == ExitCode.CANNOT_WRITE, err
    assert "Traceback" not in err
    text, summary = _report(cache)
    share = summary["confirmation_cost"]["share_of_run"] if summary["confirmation_cost"] else None
    assert share is None or share <= 1.0, summary["confirmation_cost"]
    assert not re.search(r"confirmed \(run \d+: \d+ candidates, 0 launches", text), text
    filler.unlink()
    resumed = mpitune(2, ["spec.py", "--confirm", "8"], small_disk, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    text, summary = _report(cache)
    assert summary["confirmation"] is not None and 0 < summary["confirmation_cost"]["share_of_run"] <= 1.0
    _best_line_names_the_winner(resumed.stdout, summary)
