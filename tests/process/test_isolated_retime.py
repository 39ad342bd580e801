"""Confirmation through the supervised worker, with the C backend: real processes, real gcc."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from conftest import write_scale_spec

from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Retime, Work
from mpitune.process.isolation import IsolatedBackend
from mpitune.spec.load import load_spec

# HANG 1 never returns.
HANGING_C = r"""
void scale(float *y, const float *x, int n)
{
    volatile int spin = (HANG == 1);
    while (spin) {}
    for (int i = 0; i < n; i += STEP)
        for (int u = 0; u < STEP && i + u < n; u++)
            y[i + u] = 2.0f * x[i + u];
}
"""
TIMEOUT_S = 2.0


@pytest.fixture
def isolated(tmp_path):
    write_scale_spec(tmp_path, '{"STEP": [1, 2, 4], "HANG": [0, 1]}', extra=f"timeout_s = {TIMEOUT_S}")
    (tmp_path / "scale.c").write_text(HANGING_C)
    problem, _ = load_spec(str(tmp_path / "spec.py"))
    work = tmp_path / "work"
    work.mkdir()
    clock = Clock()
    backend = IsolatedBackend(problem.kernel, str(work), clock, timeout_s=problem.kernel.timeout_s, local_rank=0)
    try:
        yield backend
    finally:
        backend.close()


def candidates(*hangs: int) -> tuple[Work, ...]:
    return tuple(Work(i, {"STEP": 1 + i, "HANG": hang}) for i, hang in enumerate(hangs))


def test_launches_come_back_from_the_worker_with_its_timeline(isolated):
    timeline = Timeline(isolated.clock)
    launches = isolated.retime(Retime(candidates(0, 0), rounds=3), timeline)
    assert len(launches) == 6
    assert all(math.isfinite(x.time_ms) and x.time_ms > 0 for x in launches)
    assert sorted((x.round, x.config_id) for x in launches) == [(r, i) for r in range(3) for i in range(2)]
    phases = [(row.phase, row.config_id) for row in timeline.rows if row.phase != "other"]
    assert phases == [("compile", -1), ("confirm", -1)]  # compiled side by side
    assert sorted(p.name for p in Path(isolated.workdir).iterdir()) == ["kernel.c"]


def test_candidates_compiled_ahead_travel_to_the_worker(isolated):
    work = candidates(0, 0)
    compiler = isolated.compiler()
    assert compiler is not None
    compiled = {w.config_id: compiler(w) for w in work}
    timeline = Timeline(isolated.clock)
    launches = isolated.retime(Retime(work, rounds=2), timeline, compiled)
    assert all(math.isfinite(x.time_ms) and x.time_ms > 0 for x in launches)
    assert [row.phase for row in timeline.rows if row.phase != "other"] == ["confirm"]


def test_a_hanging_candidate_costs_every_launch_and_the_worker_is_restarted(isolated):
    timeline = Timeline(isolated.clock)
    order = Retime(candidates(0, 1, 0), rounds=2)
    start = time.monotonic()
    launches = isolated.retime(order, timeline)
    elapsed = time.monotonic() - start
    assert len(launches) == 6 and all(math.isnan(x.time_ms) for x in launches)
    assert sorted((x.round, x.config_id) for x in launches) == [(r, i) for r in range(2) for i in range(3)]
    assert elapsed < 60  # the limit of 3 configurations (6 s) and a restart, not a hang
    assert isolated.restarts == 1
    assert {"lost", "restart"} <= {row.phase for row in timeline.rows}
    assert not list(Path(isolated.workdir).glob("*.so"))  # unlinked once loaded, before the hang
    # The fresh worker measures and re-times as before.
    result = isolated.run(Work(7, {"STEP": 2, "HANG": 0}), timeline)
    assert result.status == "ok", result.error
    again = isolated.retime(Retime(candidates(0, 0), rounds=2), timeline)
    assert all(math.isfinite(x.time_ms) and x.time_ms > 0 for x in again)
