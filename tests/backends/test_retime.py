"""Confirmation on the C backend: candidates re-timed interleaved with real gcc and real libraries."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import write_scale_spec

from mpitune.backends import c as cbackend
from mpitune.backends.base import DROP_AFTER_ROUNDS, DROP_MARGIN, clearly_slower, interleaved, unlaunched
from mpitune.model.timeline import Timeline
from mpitune.model.work import Retime, Work
from mpitune.spec.load import load_spec

# Appends its ID to the file $MPITUNE_RETIME_LOG at each call: the order of the launches, seen
# from inside the kernels. MODE 1 does not compile.
ORDER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#if MODE == 1
#error "MODE 1 is a configuration that does not compile"
#endif
void scale(float *y, const float *x, int n)
{
    const char *path = getenv("MPITUNE_RETIME_LOG");
    if (path) {
        FILE *f = fopen(path, "a");
        if (f) { fprintf(f, "%d\n", ID); fclose(f); }
    }
    for (int i = 0; i < n; i += STEP)
        for (int u = 0; u < STEP && i + u < n; u++)
            y[i + u] = 2.0f * x[i + u];
}
"""


@pytest.fixture
def backend(tmp_path, monkeypatch):
    return make_backend(tmp_path, monkeypatch)


def make_backend(tmp_path, monkeypatch):
    problem, _ = load_spec(str(write_scale_spec(tmp_path)))
    problem = replace(problem.kernel, kernel_source=ORDER_C)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MPITUNE_RETIME_LOG", str(tmp_path / "order.log"))
    b = cbackend.create(problem, str(work), 0)
    b.prepare()
    return b


def candidates(*modes: int) -> tuple[Work, ...]:
    return tuple(Work(10 + i, {"STEP": 1 + i, "MODE": mode, "ID": 10 + i}) for i, mode in enumerate(modes))


def logged(backend) -> list[int]:
    path = Path(backend.workdir).parent / "order.log"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def libraries_mapped(workdir: str) -> list[str]:
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if workdir in line]


def test_each_candidate_once_per_round_in_rotated_order(backend):
    # Three rounds: none can be dropped as clearly slower before a fourth (DROP_AFTER_ROUNDS).
    order = Retime(candidates(0, 0, 0), rounds=DROP_AFTER_ROUNDS)
    timeline = Timeline()
    launches = backend.retime(order, timeline)
    assert len(launches) == 3 * DROP_AFTER_ROUNDS
    assert all(math.isfinite(x.time_ms) and x.time_ms > 0 for x in launches)
    rounds = DROP_AFTER_ROUNDS
    rotated = [order.ids[(k + r) % 3] for r in range(rounds) for k in range(3)]
    assert [(x.round, x.config_id) for x in launches] == [
        (r, i) for r, i in zip(sorted(list(range(rounds)) * 3), rotated)
    ]
    # Inside the kernels: one warm-up each after loading, then the rounds as listed.
    assert logged(backend) == [10, 11, 12, *rotated]
    phases = [(row.phase, row.config_id) for row in timeline.rows if row.phase != "other"]
    assert phases == [("compile", -1), ("confirm", -1)]  # the three compiled side by side


def test_a_candidate_that_does_not_compile_gets_nan_and_the_others_are_timed(backend):
    order = Retime(candidates(0, 1, 0), rounds=3)
    launches = backend.retime(order, Timeline())
    assert len(launches) == 9
    by_id: dict[int, list[float]] = {}
    for x in launches:
        by_id.setdefault(x.config_id, []).append(x.time_ms)
    assert all(math.isnan(t) for t in by_id[11])
    assert all(math.isfinite(t) and t > 0 for i in (10, 12) for t in by_id[i])
    assert sorted(by_id) == [10, 11, 12] and all(len(v) == 3 for v in by_id.values())


def test_a_missing_symbol_gets_nan_and_its_library_is_unloaded(backend):
    backend.problem = replace(backend.problem, kernel_name="not_there")
    launches = backend.retime(Retime(candidates(0, 0), rounds=2), Timeline())
    assert len(launches) == 4 and all(math.isnan(x.time_ms) for x in launches)
    assert libraries_mapped(backend.workdir) == []


def test_candidates_compiled_ahead_are_used_and_not_compiled_again(tmp_path, monkeypatch):
    """gcc behind a wrapper that logs every library it builds: only the one not compiled ahead."""
    built = tmp_path / "built.log"
    wrapper = tmp_path / "cc.sh"
    wrapper.write_text(f'#!/bin/sh\nfor a; do case "$a" in *.so) echo "$a" >> {built};; esac; done\nexec gcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    backend_ = make_backend(tmp_path, monkeypatch)
    work = candidates(0, 0, 0)
    compiled = {w.config_id: backend_.compiler()(w) for w in work[:2]}
    built.unlink()
    timeline = Timeline()
    launches = backend_.retime(Retime(work, rounds=2), timeline, compiled)
    assert all(math.isfinite(x.time_ms) and x.time_ms > 0 for x in launches)
    assert [Path(line).name for line in built.read_text().split()] == ["config12.so"]
    phases = [(row.phase, row.config_id) for row in timeline.rows if row.phase != "other"]
    assert phases == [("compile", -1), ("confirm", -1)]


def test_nothing_is_left_behind(backend):
    work = candidates(0, 1, 0)
    compiled = {10: backend.compiler()(work[0])}
    backend.retime(Retime(work, rounds=2), Timeline(), compiled)
    assert sorted(p.name for p in Path(backend.workdir).iterdir()) == ["kernel.c"]
    assert libraries_mapped(backend.workdir) == []
    # And a plain run still works after.
    assert backend.run(Work(20, {"STEP": 2, "MODE": 0, "ID": 20}), Timeline()).status == "ok"


def test_interleaving_rotates_and_a_failing_candidate_is_launched_no_more():
    calls: list[int] = []

    def launch_ms(i: int) -> float:
        calls.append(i)
        if i == 1:
            raise RuntimeError("bad candidate")
        return 1.0 + i

    launches = interleaved((5, 6, 7), 3, launch_ms)
    assert [(x.round, x.config_id) for x in launches] == [
        (0, 5), (0, 6), (0, 7), (1, 6), (1, 7), (1, 5), (2, 7), (2, 5), (2, 6)
    ]  # fmt: skip
    assert calls == [0, 1, 2, 2, 0, 2, 0]
    assert [x.time_ms for x in launches if x.config_id != 6] == [1.0, 3.0, 3.0, 1.0, 3.0, 1.0]
    assert all(math.isnan(x.time_ms) for x in launches if x.config_id == 6)
    nan = unlaunched(Retime(candidates(0, 0), rounds=2))
    assert len(nan) == 4 and all(math.isnan(x.time_ms) for x in nan)


def test_a_candidate_clearly_slower_than_the_fastest_is_launched_no_more_after_three_rounds():
    calls: list[int] = []
    # Candidate 1 is 4 % slower than candidate 0 (within the margin), candidate 2 twice as slow.
    base_ms = {0: 1.0, 1: 1.04, 2: 2.0}

    def launch_ms(i: int) -> float:
        calls.append(i)
        return base_ms[i] * (1.0 + 0.001 * len(calls))  # a little drift, as on a device

    launches = interleaved((5, 6, 7), 5, launch_ms)
    assert len(launches) == 15
    by_id = {c: [x.time_ms for x in launches if x.config_id == c] for c in (5, 6, 7)}
    assert all(math.isfinite(t) for c in (5, 6) for t in by_id[c])  # within the margin: every round
    assert all(math.isfinite(t) for t in by_id[7][:DROP_AFTER_ROUNDS])
    assert all(math.isnan(t) for t in by_id[7][DROP_AFTER_ROUNDS:])  # dropped: NaN, not launched
    assert calls.count(2) == DROP_AFTER_ROUNDS and calls.count(0) == calls.count(1) == 5


def test_clearly_slower_needs_every_launch_beyond_the_margin_of_the_fastests_slowest():
    assert clearly_slower({0: [1.0, 1.0, 1.0], 1: [1.06, 1.2, 1.1]}) == {1}
    # One launch of candidate 1 within DROP_MARGIN x the fastest's slowest launch: kept.
    assert clearly_slower({0: [1.0, 1.0, 1.0], 1: [DROP_MARGIN * 0.99, 1.2, 1.1]}) == set()
    # The fastest is the one with the lowest median, and a failed candidate (NaN) is nobody's judge.
    assert clearly_slower({0: [0.5, 3.0, 3.0], 1: [2.0, 2.0, 2.0], 2: [math.nan, 0.1, 0.1]}) == set()
    assert clearly_slower({}) == set()
