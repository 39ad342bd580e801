"""Issue 31, class 1: the results file under foreign hands. Removed (``rm``), replaced (``mv
other.h5 run.h5``) or truncated (``: > run.h5``) while a real run writes it, the file is found
lost at rank 0's next write: every rank ends with exit code 74 and one line that says what
happened and where the rows went, a file beside the path holding every row recorded before,
and no line claims results where there are none. Each case prints the seconds from the act to
the job's end (``-s``)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import h5py
import pytest
from conftest import start_mpitune, write_scale_spec

from mpitune.exits import ExitCode
from mpitune.store.reader import read

OTHER = b"not the results of this run\n"

# 50 ms a launch, 0.2 s a configuration (verify + 3 iterations): a run to act in the middle of.
SLOW_C = r"""
#include <unistd.h>
void scale(float *y, const float *x, int n)
{
    usleep(50000);
    for (int i = 0; i < n; i++)
        y[i] = 2.0f * x[i];
}
"""


def _recorded(cache: Path) -> list[int]:
    """The configuration ids the file holds now, read as ``watch`` reads it during a run; none
    while it is being made."""
    try:
        with h5py.File(cache, "r", swmr=True) as f:
            return [int(i) for i in f["results"]["config_id"]]
    except (OSError, KeyError):
        return []


def _wait_for_rows(job: subprocess.Popen, cache: Path, rows: int) -> list[int]:
    """Poll the file until it holds ``rows`` results (or the job ends, or a minute passes)."""
    until = time.monotonic() + 60
    while time.monotonic() < until and job.poll() is None:
        ids = _recorded(cache)
        if len(ids) >= rows:
            return ids
        time.sleep(0.05)
    job.kill()
    pytest.fail(f"the file never held {rows} rows: {job.communicate()}")


def _remove(cache: Path) -> None:
    cache.unlink()


def _replace(cache: Path) -> None:
    other = cache.with_name("other.h5")
    other.write_bytes(OTHER)
    os.replace(other, cache)


def _truncate(cache: Path) -> None:
    with open(cache, "w"):
        pass


@pytest.mark.parametrize(
    ("ranks", "act", "words", "left"),
    [
        (2, _remove, "was removed", None),
        (1, _replace, "was replaced by another file", OTHER),
        (1, _truncate, "was truncated", b""),
    ],
)
def test_a_run_whose_file_is_taken_keeps_every_row_beside_it_and_says_where(tmp_path, ranks, act, words, left):
    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 41)), "MODE": [0]}')
    (tmp_path / "scale.c").write_text(SLOW_C)
    cache = tmp_path / "run.h5"
    job = start_mpitune(ranks, [str(spec), "--cache", str(cache)], tmp_path)
    before = _wait_for_rows(job, cache, 2)
    act(cache)
    acted = time.monotonic()
    out, err = job.communicate(timeout=60)
    took = time.monotonic() - acted
    assert job.returncode == ExitCode.CANNOT_WRITE, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("mpitune: error:")]
    assert len(errors) == 1 and f"{cache} {words}" in errors[0] and errors[0].endswith("(exit code 74)"), err
    assert "results in" not in out, out  # nothing claims results where there are none
    assert took < 30, took  # found at the next write, the batches in flight recorded, not the whole run
    rescued = Path(re.search(r"is kept in (\S+):", err).group(1))
    assert rescued.parent == tmp_path and rescued.name == f"run.h5.rescued-{rescued.name.split('-')[-1]}"
    ids = read(str(rescued)).results["config_id"].tolist()
    assert set(before) <= set(ids) and len(set(ids)) == len(ids), (before, ids)
    assert f"everything it recorded ({len(ids)} results)" in err
    assert (cache.read_bytes() if cache.exists() else None) == left  # what took its place is untouched
    print(f"measured: {act.__name__[1:]}, {ranks} rank(s): exit 74 {took:.1f} s after the act, {len(ids)} rows kept")
    # Every configuration measured is recorded: the batches in flight were finished into that file.
    assert re.search(rf"^mpitune: {len(ids)} configurations measured in .* \(file_lost\)$", out, re.M), out
