"""``iterations`` is bounded at load by what one results row may hold: every timed launch's time
is kept, so 10^8 launches a configuration would take gigabytes before the first row is written.
A value beyond the bound is refused on rank 0 in one line naming the bound and why."""

import time

import numpy as np
import pytest
from conftest import mpitune, write_scale_spec

from mpitune.errors import SpecError
from mpitune.spec.load import MAX_ITERATIONS, MAX_TIMES_BYTES, load_names


def names(iterations) -> dict:
    x = np.arange(8, dtype=np.float32)
    return {
        "lang": "C",
        "kernel_name": "scale",
        "kernel_source": "void scale(float *y, const float *x) { for (int i = 0; i < 8; i++) y[i] = 2 * x[i]; }",
        "tune_params": {"STEP": [1]},
        "arguments": [np.zeros(8, np.float32), x],
        "answer": [2 * x, None],
        "iterations": iterations,
    }


def test_the_bound_is_what_one_row_of_launch_times_may_hold():
    assert MAX_ITERATIONS * 8 == MAX_TIMES_BYTES and MAX_ITERATIONS == 1_000_000


@pytest.mark.parametrize("iterations", [1, 10_000, 100_000, MAX_ITERATIONS])
def test_up_to_the_bound_iterations_load(tmp_path, iterations):
    problem, _ = load_names(names(iterations), "spec.py", str(tmp_path))
    assert problem.kernel.iterations == iterations


@pytest.mark.parametrize("iterations", [MAX_ITERATIONS + 1, 10**8, np.int64(10**9), 10**30])
def test_beyond_the_bound_iterations_are_refused_in_one_line_with_the_bound_and_why(tmp_path, iterations):
    with pytest.raises(SpecError) as caught:
        load_names(names(iterations), "spec.py", str(tmp_path))
    line = str(caught.value)
    assert "\n" not in line and "iterations" in line and "at most 1,000,000" in line, line
    assert f"got {int(iterations):,}" in line and "8 MB" in line, line


def test_a_run_asking_for_a_hundred_million_launches_ends_on_every_rank_with_the_line(tmp_path):
    """The issue's case, run for real: before, 13 GB and an HDF5 traceback; now the load refuses it."""
    spec = write_scale_spec(tmp_path, extra="iterations = 100_000_000\n")
    started = time.monotonic()
    out = mpitune(2, [str(spec)], tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if "iterations: must be at most 1,000,000" in line]
    assert len(lines) == 1, out.stderr[-2000:]
    assert time.monotonic() - started < 60  # generous: a loaded 2-core machine; before, it never ended cleanly
    assert not (tmp_path / "spec.h5").exists()
