"""Where each rank's time went, on a real file tuned on 2 real MPI ranks (conftest's
``run_with_failures``) and on hand-made columns."""

from __future__ import annotations

import numpy as np
import pytest

from mpitune.model.timeline import BACKGROUND_PHASES, IDLE_PHASES
from mpitune.offline.rank_time import gather_waits, per_rank, run_walls, startup
from mpitune.store.reader import read


def test_a_run_that_never_finished_takes_its_last_recorded_phase_as_its_wall():
    walls = run_walls(
        np.array([1, 2]),
        np.array([4.5, np.nan]),  # run 2 was killed: no wall_s
        np.array([1, 1, 2, 2, 2]),
        np.array([1.0, 4.0, 0.5, 7.25, 3.0]),
    )
    assert walls == [4.5, 7.25]
    assert run_walls(np.array([3]), np.array([np.nan]), np.array([1]), np.array([2.0])) == [0.0]


def test_every_rank_busy_and_idle_add_up_and_each_rank_batch_is_counted_once(run_with_failures):
    data = read(str(run_with_failures))
    ranks = per_rank(data)
    assert [r.rank for r in ranks] == [0, 1]
    for r in ranks:
        assert r.busy_s + r.idle_s == pytest.approx(r.wall_s, rel=0.03)
        assert r.other_s == pytest.approx(r.busy_s - r.compile_s - r.verify_s - r.benchmark_s)
    assert sum(r.configs for r in ranks) == len(data.results)
    t = data.timeline
    kept = (t["batch"] >= 0) & ~np.isin(t["phase"], BACKGROUND_PHASES)
    pairs = {(int(u), int(r), int(b)) for u, r, b in zip(t["run"][kept], t["rank"][kept], t["batch"][kept])}
    waits = gather_waits(data)
    assert waits.rank_batches == len(pairs)
    assert 0 <= waits.waited <= waits.rank_batches
    # Waited beyond the least waiting rank of each batch: more than nothing (two ranks never idle
    # alike), less than all their idle time (the least waiting rank waits too).
    idle = kept & np.isin(t["phase"], IDLE_PHASES)
    assert 0 < waits.wait_s < float((t["end_s"] - t["start_s"])[idle].sum())
    start = startup(ranks)
    assert start.spec_s == ranks[0].spec_s > 0
    assert start.mpitune_min_s <= start.mpitune_max_s
