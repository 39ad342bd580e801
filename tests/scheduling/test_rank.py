"""A rank's chunk under the first-launch race: every first launch before any timed one, then
timed launches fastest first (scheduling/rank.py, ``Chunk.two_passes``), on the real C backend
with real compile workers; and rank 0's rows as one timeline while it measures beside its
gathers (``Merge``)."""

import itertools

import numpy as np

from mpitune.backends import c as cbackend
from mpitune.model.judging.racing import Race, RaceRule
from mpitune.model.timeline import BACKGROUND_PHASES, Clock, PhaseRow, Timeline
from mpitune.model.work import Work
from mpitune.process.compile_ahead import CompileAhead
from mpitune.scheduling.messages import Order
from mpitune.scheduling.rank import Merge, carry_out
from mpitune.spec.load import load_names

# Counts its launches per configuration in the test's own memory (the address travels as a
# 64-bit scalar) and spins 50,000 x 4^(3 - SLOT) times: each configuration takes 4 times the next.
SOURCE = r"""
void spin(float *y, long long counts, int n)
{
    volatile float acc = 0.0f;
    ((int *)counts)[SLOT] += 1;
    for (long i = 0; i < (50000L << (2 * (3 - SLOT))); i++)
        acc += (float)i * 1e-9f;
    for (int i = 0; i < n; i++)
        y[i] = 1.0f;
}
"""
# Slowest first: in the order it came in, each configuration would beat the best before it by
# far more than any bound, and every one would get all its launches.
SLOTS = (0, 1, 2, 3)
ITERATIONS = 5


def measure(tmp_path, counts: np.ndarray, slots, rule: RaceRule):
    names = {
        "lang": "C",
        "kernel_name": "spin",
        "kernel_source": SOURCE,
        "tune_params": {"SLOT": list(SLOTS)},
        "arguments": [np.zeros(4, np.float32), np.int64(counts.ctypes.data), np.int32(4)],
        "answer": [np.ones(4, np.float32), None, None],
        "iterations": ITERATIONS,
    }
    problem, _ = load_names(names, "test", str(tmp_path))
    backend = cbackend.create(problem.kernel, str(tmp_path), 0)
    backend.prepare()
    ahead = CompileAhead(1, Clock(), backend.compiler())
    work = tuple(Work(slot, {"SLOT": slot}) for slot in slots)
    try:
        order = Order(0.0, batch=0, work=work, race=Race(rule=rule))
        return carry_out(order, backend, 0, Timeline(), ahead).results
    finally:
        ahead.close()
        backend.close()


def test_the_fastest_first_launch_is_timed_first_and_the_slower_ones_lose_on_the_launch_they_made(tmp_path):
    counts = np.zeros(len(SLOTS), np.int32)
    results = measure(tmp_path, counts, SLOTS, RaceRule.FIRST)
    assert [r.config_id for r in results] == [0, 1, 2, 3]  # in the chunk's order
    assert all(r.status == "ok" for r in results), [r.error for r in results]
    fastest = results[-1]
    assert not fastest.raced and len(fastest.times_ms) == ITERATIONS
    # The fastest was launched once in the first pass, then verified and timed whole.
    assert counts[-1] == 1 + 1 + ITERATIONS
    # The slowest two are 16 and 64 times the fastest: their first launch was all they got.
    for r, count in zip(results[:2], counts[:2]):
        assert r.raced and r.times_ms == (r.first_ms,) and count == 1
    # In the order they came, all four would have been timed whole: 4 x (1 + 5) launches.
    assert counts.sum() < len(SLOTS) * (1 + ITERATIONS) - ITERATIONS


def test_other_rules_and_a_chunk_of_one_are_measured_in_one_pass(tmp_path):
    counts = np.zeros(len(SLOTS), np.int32)
    results = measure(tmp_path, counts, SLOTS, RaceRule.SPREAD)
    assert all(not r.raced and len(r.times_ms) == ITERATIONS for r in results)
    assert counts.tolist() == [1 + ITERATIONS] * len(SLOTS)
    counts[:] = 0
    (one,) = measure(tmp_path, counts, SLOTS[:1], RaceRule.FIRST)
    assert not one.raced and counts[0] == 1 + ITERATIONS


def test_rank_0s_main_and_measuring_rows_merge_into_one_timeline_that_adds_up_to_its_wall():
    """Rank 0's main thread waited, wrote and asked the strategy while its lane measured: the
    lane's rows stand, the main thread's waiting under them goes, its writing and asking under
    them stand beside as background phases, and every second is in one phase."""
    main = [
        PhaseRow(0, -1, "wait", 0.0, 2.0),
        PhaseRow(0, -1, "write", 2.0, 2.5),
        PhaseRow(0, -1, "strategy", 2.5, 3.0),
        PhaseRow(1, -1, "wait", 3.0, 5.0),
    ]
    chunk = [PhaseRow(1, 7, "compile", 1.0, 1.5), PhaseRow(1, 7, "verify", 1.5, 1.6)]
    chunk.append(PhaseRow(1, 7, "benchmark", 1.6, 2.75))
    later = [PhaseRow(2, 9, "verify", 4.0, 4.5)]
    merge = Merge()
    rows = merge.rows(main, chunk, 2.75) + merge.rows([], later, 4.5) + merge.rows([], [], None)
    own = sorted((r.start_s, r.end_s, r.phase) for r in rows if r.phase not in BACKGROUND_PHASES)
    assert own == [
        (0.0, 1.0, "wait"),
        (1.0, 1.5, "compile"),
        (1.5, 1.6, "verify"),
        (1.6, 2.75, "benchmark"),
        (2.75, 3.0, "strategy"),
        (3.0, 4.0, "wait"),
        (4.0, 4.5, "verify"),
        (4.5, 5.0, "wait"),
    ]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(own))  # no gap, no overlap: they add up to 5 s
    beside = sorted((r.start_s, r.end_s, r.phase) for r in rows if r.phase in BACKGROUND_PHASES)
    assert beside == [(2.0, 2.5, "write_beside"), (2.5, 2.75, "strategy_beside")]
