"""What one configuration costs on the C backend: the verified launch is the warm-up, timed on its
own, then the timed ones, fewer when a race stops them (none when it stops on the verified
launch); and the first timed launch is already warm."""

import numpy as np
import pytest

from mpitune.backends import c as cbackend
from mpitune.model.judging.racing import Race, RaceRule
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work
from mpitune.spec.load import load_names

# Counts its calls in the test's own memory (the address travels as a 64-bit scalar) and
# spins for WORK iterations so that its time is well above the timer's resolution.
SOURCE = r"""
void tick(float *y, long long counter, int n)
{
    volatile float acc = 0.0f;
    *(int *)counter += 1;
    for (int i = 0; i < WORK; i++)
        acc += (float)i * 1e-9f;
    for (int i = 0; i < n; i++)
        y[i] = 1.0f;
}
"""


def backend(tmp_path, counter: np.ndarray, iterations: int, work=(1000,)):
    names = {
        "lang": "C",
        "kernel_name": "tick",
        "kernel_source": SOURCE,
        "tune_params": {"WORK": list(work)},
        "arguments": [np.zeros(4, np.float32), np.int64(counter.ctypes.data), np.int32(4)],
        "answer": [np.ones(4, np.float32), None, None],
        "iterations": iterations,
    }
    problem, _ = load_names(names, "test", str(tmp_path))
    b = cbackend.create(problem.kernel, str(tmp_path), 0)
    b.prepare()
    return b


def test_a_configuration_costs_one_verified_launch_and_the_timed_ones(tmp_path):
    counter = np.zeros(1, np.int32)
    r = backend(tmp_path, counter, iterations=5).run(Work(0, {"WORK": 1000}), Timeline())
    assert r.status == "ok", r.error
    assert counter[0] == 1 + 5 and len(r.times_ms) == 5 and not r.raced
    assert r.first_ms > 0  # the verified launch, timed on its own


def test_a_race_stops_a_slower_configuration_once_most_of_its_launches_lost(tmp_path):
    counter = np.zeros(1, np.int32)
    majority = Race(best_ms=1e-9, rule=RaceRule.MAJORITY)
    r = backend(tmp_path, counter, iterations=5).run(Work(0, {"WORK": 1000}), Timeline(), race=majority)
    assert r.status == "ok" and r.raced
    assert counter[0] == 1 + 3 and len(r.times_ms) == 3 and r.time_ms == float(np.median(r.times_ms))
    counter[0] = 0
    kept = backend(tmp_path, counter, iterations=5).run(Work(0, {"WORK": 1000}), Timeline(), race=Race(best_ms=1e9))
    assert counter[0] == 6 and len(kept.times_ms) == 5 and not kept.raced


def test_the_default_race_stops_a_slower_configuration_on_its_verified_launch(tmp_path):
    """No timed launch: the verified one, timed, is its one time, so that the file (``launches``
    1, ``raced`` 1) and the strategies see a time above the bound."""
    counter = np.zeros(1, np.int32)
    r = backend(tmp_path, counter, iterations=5).run(Work(0, {"WORK": 1000}), Timeline(), race=Race(best_ms=1e-9))
    assert r.status == "ok" and r.raced and counter[0] == 1
    assert r.first_ms > 0 and r.times_ms == (r.first_ms,) and r.time_ms == r.first_ms
    # A configuration whose first launch survives is raced as under the spread rule, after one launch.
    counter[0] = 0
    after_one = backend(tmp_path, counter, iterations=5).run(
        Work(0, {"WORK": 1000}), Timeline(), race=Race(best_ms=1e-9, first_ratio=1e12)
    )
    assert after_one.raced and counter[0] == 1 + 1 and len(after_one.times_ms) == 1


def test_the_first_timed_launch_is_no_slower_than_the_rest(tmp_path):
    """The verified launch is the warm-up: the timed launch after it is already warm, so a
    separate warm-up launch would not move the median. Judged within each run (its first timed
    launch against the median of the others, taken moments apart), and by the median of that
    ratio over many runs, so that other work on the machine, which slows whole stretches of
    launches by two or three times, falls on both sides alike."""
    counter = np.zeros(1, np.int32)
    work = (100_000, 200_000)  # a fraction of a millisecond: seldom cut by another process
    timed = backend(tmp_path, counter, iterations=9, work=work)
    for w in work:
        ratios = []
        for i in range(25):
            times_ms = timed.run(Work(i, {"WORK": w}), Timeline()).times_ms
            ratios.append(times_ms[0] / float(np.median(times_ms[1:])))
        assert float(np.median(ratios)) == pytest.approx(1.0, abs=0.15), ratios
