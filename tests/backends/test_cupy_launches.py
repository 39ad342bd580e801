"""On a GPU (skipped elsewhere): the verified launch is the only one not among the timed ones
(timed on its own), a race stops a slower configuration (by default on that launch already), and
medians of fixed configurations do not move without a separate warm-up."""

import numpy as np
import pytest
from test_cupy import SPIN, measure, problem

from mpitune.backends.cupy import create
from mpitune.model.judging.racing import RATIO_FLOOR, Race, RaceRule
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work

COUNT = r"""
extern "C" __global__ void count(int *calls) { if (threadIdx.x == 0) atomicAdd(calls, 1); }
"""


def test_a_configuration_costs_one_verified_launch_and_the_timed_ones(cp, tmp_path):
    p = problem(COUNT, "count", [np.zeros(1, np.int32)], None, {"block_size_x": [32]}, (32,), iterations=5)
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    try:
        r = backend.run(Work(0, {"block_size_x": 32}), Timeline())
        assert r.status == "ok" and len(r.times_ms) == 5
        assert int(backend._args[0].get()[0]) == 1 + 5  # reset before the verified launch
        raced = backend.run(Work(1, {"block_size_x": 32}), Timeline(), race=Race(best_ms=1e-9, rule=RaceRule.MAJORITY))
        # Raced once most of the 5 launches lost: after 3 of them, and the verified one.
        assert raced.raced and len(raced.times_ms) == 3 and int(backend._args[0].get()[0]) == 1 + 3
    finally:
        backend.close()


SPIN_COUNT = r"""
extern "C" __global__ void spin_count(int *calls) {
    unsigned long long start, now;
    if (threadIdx.x == 0) atomicAdd(calls, 1);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < SPIN_NS);
}
"""


def test_the_default_race_stops_a_slow_configuration_on_its_verified_launch(cp, tmp_path):
    """A configuration 100 times slower than the best known gets no timed launch: its verified
    launch, timed between events around the kernel alone, is its one time."""
    spins = [100_000, 10_000_000]
    p = problem(
        SPIN_COUNT,
        "spin_count",
        [np.zeros(1, np.int32)],
        None,
        {"SPIN_NS": spins, "block_size_x": [32]},
        (32,),
        iterations=5,
    )
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    try:
        fast = backend.run(Work(0, {"SPIN_NS": spins[0], "block_size_x": 32}), Timeline(), race=Race())
        assert fast.status == "ok" and not fast.raced and len(fast.times_ms) == 5, fast.error
        assert int(backend._args[0].get()[0]) == 1 + 5 and fast.first_ms >= 0.1  # it spins 0.1 ms at least
        race = Race().after([fast])
        assert race.rule is RaceRule.FIRST and race.first_ratio >= RATIO_FLOOR
        slow = backend.run(Work(1, {"SPIN_NS": spins[1], "block_size_x": 32}), Timeline(), race=race)
        assert slow.status == "ok" and slow.raced, slow.error
        assert int(backend._args[0].get()[0]) == 1  # reset, then the verified launch only
        assert slow.first_ms >= 10.0 and slow.times_ms == (slow.first_ms,) and slow.time_ms == slow.first_ms
    finally:
        backend.close()


@pytest.mark.parametrize("spin_ns", [200_000, 1_000_000])
def test_the_median_does_not_move_without_the_separate_warm_up(cp, tmp_path, spin_ns):
    config = {"SPIN_NS": spin_ns, "block_size_x": 32}
    medians: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(3):
        for key, iterations in (("with", 8), ("without", 7)):
            p = problem(
                SPIN,
                "spin",
                [np.zeros(1, np.int32)],
                [np.ones(1, np.int32)],
                {"SPIN_NS": [spin_ns], "block_size_x": [32]},
                (32,),
                iterations=iterations,
            )
            (r,), _, _ = measure(p, [config], tmp_path)
            assert r.status == "ok", r.error
            medians[key].append(float(np.median(r.times_ms[1:] if key == "with" else r.times_ms)))
    assert np.median(medians["without"]) == pytest.approx(np.median(medians["with"]), rel=0.02), medians
