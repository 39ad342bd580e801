"""The simulated clock's charges: rank 0's own work per entry into its phase, and the recorded
start-up as a rank's first phases; and what a run's timeline says of them."""

import numpy as np
import pytest

from mpitune.model import schema
from mpitune.model.replay_clock import RecordedRun, compile_workers, recorded_run
from mpitune.model.timeline import Clock, Timeline


def test_a_simulated_clock_charges_each_entry_into_a_charged_phase():
    timeline = Timeline(Clock(simulated=True, charges_s={"write": 0.25}))
    for _ in range(2):
        with timeline.phase("write"):
            pass
    with timeline.phase("strategy"):
        pass
    assert timeline.clock.now() == pytest.approx(0.5)
    assert [(r.phase, r.start_s, r.end_s) for r in timeline.rows] == [
        ("write", 0.0, 0.25),
        ("write", 0.25, 0.5),
        ("strategy", 0.5, 0.5),
    ]


def test_the_recorded_start_up_is_each_ranks_first_phases():
    recorded = RecordedRun(source="an mpitune run", spec_s=0.5, startup_s=(0.8, 1.2), assumptions=())
    rank0, rank3 = Timeline(Clock(simulated=True)), Timeline(Clock(simulated=True))
    recorded.charge_start(rank0, 0)
    recorded.charge_start(rank3, 3)  # beyond the run's ranks: as its last one
    assert [(r.phase, r.start_s, r.end_s) for r in rank0.rows] == [("spec", 0.0, 0.5), ("startup", 0.5, 1.3)]
    assert [(r.phase, r.start_s, r.end_s) for r in rank3.rows] == [("startup", 0.0, 1.2)]
    assert (rank0.clock.now(), rank3.clock.now()) == (1.3, 1.2)
    assert "spec 0.50 s and start-up up to 1.20 s" in recorded.describe()
    assert "assumed: no spec loading" in RecordedRun().describe()


def test_compile_workers_are_the_most_compiles_that_overlapped_on_one_rank():
    rows = [(0, 0, "compile_ahead", 0.0, 1.0), (0, 0, "compile_ahead", 0.5, 2.0), (0, 0, "compile_ahead", 1.0, 1.5)]
    rows += [(0, 1, "compile_ahead", 0.0, 1.0), (0, 0, "verify", 0.0, 3.0)]
    timeline = np.array(
        [(0, rank, 0, i, phase, s, e) for i, (_, rank, phase, s, e) in enumerate(rows)],
        dtype=[(c.name, "U16" if c.dtype == schema.SHORT_TEXT else c.dtype) for c in schema.TIMELINE_COLUMNS],
    )
    # On rank 0: two at 0.5, the first ends as the third starts (at 1.0), so never three.
    assert compile_workers(timeline) == 2
    assert compile_workers(timeline[timeline["phase"] == "verify"]) == 0


def test_the_compile_workers_are_ready_when_each_ranks_first_compiled():
    rows = [(0, 0, "compile_ahead", 2.0, 2.5), (0, 0, "compile_ahead", 1.5, 2.0), (0, 1, "compile_ahead", 3.0, 3.1)]
    rows += [(1, 0, "compile_ahead", 0.5, 0.6), (0, 2, "verify", 0.0, 1.0)]
    timeline = np.array(
        [(run, rank, 0, i, phase, s, e) for i, (run, rank, phase, s, e) in enumerate(rows)],
        dtype=[(c.name, "U16" if c.dtype == schema.SHORT_TEXT else c.dtype) for c in schema.TIMELINE_COLUMNS],
    )
    retimed = np.zeros(0, dtype=[(c.name, c.dtype) for c in schema.RETIMED_COLUMNS if c.dtype != schema.SHORT_TEXT])
    recorded = recorded_run(timeline, retimed, False, {}, frozenset())
    # Rank 0: 1.5 in run 0 and 0.5 in run 1, averaged; rank 1: 3.0; rank 2 compiled nothing ahead.
    assert recorded.compile_ready_s == (pytest.approx(1.0), pytest.approx(3.0), 0.0)
    assert recorded.rank_compile_ready_s(5) == 0.0  # beyond the run's ranks: as its last one
    assert RecordedRun().rank_compile_ready_s(0) == 0.0
