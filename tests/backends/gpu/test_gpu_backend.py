"""``GpuBackend``'s steps on a platform of the host (host_gpu.py): real gcc compiles of the source a
GPU compiler would get, verified, timed, raced, timed again, with the failures' meanings.

The CuPy backend takes these same steps on a GPU (tests/backends/test_cupy*.py, marked gpu)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from host_gpu import MAX_THREADS, HostGpu

from mpitune.backends.gpu.failures import DeviceLostError
from mpitune.errors import UserError
from mpitune.model.judging.racing import Race, RaceRule
from mpitune.model.problem import Kernel
from mpitune.model.timeline import Timeline
from mpitune.model.work import Retime, Work

NO_DIV = {"x": None, "y": None, "z": None}

# Covers the elements its grid and blocks cover, which the defines give: a wrong grid fails.
VADD = r"""
int vadd(float *c, const float *a, const float *b, int n) {
#if BROKEN
    this is not C;
#endif
#if TRAP
    return 1;
#endif
    for (int i = 0; i < grid_size_x * block_size_x && i < n; i++) c[i] = WRONG ? a[i] - b[i] : a[i] + b[i];
    return 0;
}
"""

# Each launch appends its ID to the log (log[0] counts the entries): the launches' order.
ORDER = r"""
int order(int *log) {
    int k = log[0]++;
    if (k + 1 < LOG_SIZE) log[k + 1] = ID;
    return TRAP;
}
"""
LOG_SIZE = 64


def vadd(n: int = 1000, **kw) -> Kernel:
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    return Kernel(
        spec_path="host",
        kernel_name="vadd",
        kernel_source=VADD,
        lang="cupy",
        problem_size=(n,),
        arguments=[np.zeros(n, np.float32), a, b, np.int32(n)],
        answer=[a + b, None, None, None],
        atol=1e-6,
        tune_params={"block_size_x": [64, 256], "WRONG": [0, 1], "BROKEN": [0, 1], "TRAP": [0, 1]},
        grid_div=kw.pop("grid_div", dict(NO_DIV)),
        iterations=kw.pop("iterations", 5),
        **kw,
    )


def order_problem() -> Kernel:
    return Kernel(
        spec_path="host",
        kernel_name="order",
        kernel_source=ORDER,
        lang="cupy",
        problem_size=(32,),
        arguments=[np.zeros(LOG_SIZE, np.int32)],
        answer=None,
        atol=1e-6,
        tune_params={"block_size_x": [32, 2048], "ID": list(range(10)), "LOG_SIZE": [LOG_SIZE], "TRAP": [0, 1]},
        grid_div=dict(NO_DIV),
        iterations=5,
    )


def config(block: int = 256, wrong: int = 0, broken: int = 0, trap: int = 0) -> dict:
    return {"block_size_x": block, "WRONG": wrong, "BROKEN": broken, "TRAP": trap}


@pytest.fixture
def opened(tmp_path):
    """A prepared backend of a problem, closed after the test."""
    made: list[HostGpu] = []

    def open_(problem: Kernel, **kw) -> HostGpu:
        backend = HostGpu(problem, str(tmp_path), **kw)
        backend.prepare()
        made.append(backend)
        return backend

    yield open_
    for backend in made:
        backend.close()


def test_each_configuration_is_verified_then_timed(opened):
    backend = opened(vadd())
    timeline = Timeline()
    results = [backend.run(Work(i, c), timeline) for i, c in enumerate([config(64), config(256), config(wrong=1)])]
    assert [r.status for r in results] == ["ok", "ok", "verify_failed"], [r.error for r in results]
    for r in results[:2]:
        assert len(r.times_ms) == 5 and r.time_ms == pytest.approx(float(np.median(r.times_ms)))
        assert r.first_ms >= 0 and r.compile_s > 0 and r.verify_s > 0
    assert "differ by more than atol" in results[2].error and results[2].times_ms == ()
    phases = [(row.config_id, row.phase) for row in timeline.rows if row.phase != "other"]
    assert phases[:6] == [(i, p) for i in range(2) for p in ("compile", "verify", "benchmark")]
    assert backend.launches == 2 * (1 + 5) + 1  # the verified launch and the timed ones; one for the wrong one


def test_the_grid_the_kernel_sees_is_the_one_it_is_launched_on(opened):
    """The grid reaches the kernel through its defines: one half its size covers half the output."""
    halved = opened(vadd(grid_div={"x": "block_size_x * 2", "y": None, "z": None}))
    result = halved.run(Work(0, config()), Timeline())
    assert result.status == "verify_failed" and "488 of 1000" in result.error  # 2 blocks of 256 cover 512, result.error


def test_compile_errors_and_refused_launches_leave_the_rank_measuring(opened):
    backend = opened(vadd())
    broken, refused, fine = (
        backend.run(Work(0, config(broken=1)), Timeline()),
        backend.run(Work(1, config(block=2048)), Timeline()),
        backend.run(Work(2, config()), Timeline()),
    )
    assert broken.status == "compile_error" and "error" in broken.error and len(broken.error.splitlines()) <= 13
    assert refused.status == "launch_error" and "2048 threads" in refused.error
    assert f"at most {MAX_THREADS} threads per block" in refused.error
    assert fine.status == "ok" and backend.fatal_error == ""


def test_a_geometry_that_cannot_be_computed_is_a_launch_error(opened):
    backend = opened(vadd(grid_div={"x": "block_size_x - 256", "y": None, "z": None}))
    result = backend.run(Work(0, config()), Timeline())
    assert result.status == "launch_error" and "launch geometry" in result.error


def test_a_trap_loses_the_context_and_the_rank_refuses_to_go_on(opened):
    backend = opened(vadd())
    trapped = backend.run(Work(0, config(trap=1)), Timeline())
    assert trapped.status == "runtime_error" and "poisons the host context" in trapped.error
    assert backend.fatal_error == trapped.error
    with pytest.raises(DeviceLostError, match="the verify run"):
        backend.run(Work(1, config()), Timeline())
    launches = backend.retime(Retime((Work(2, config()),), rounds=2), Timeline())
    assert len(launches) == 2 and all(math.isnan(x.time_ms) for x in launches)


def test_a_race_stops_a_slower_configuration_early(opened):
    backend = opened(vadd())
    raced = backend.run(Work(0, config()), Timeline(), race=Race(best_ms=1e-12, rule=RaceRule.MAJORITY))
    assert raced.status == "ok" and raced.raced and len(raced.times_ms) == 3  # most of 5 lost
    assert backend.launches == 1 + 3


def test_the_outputs_of_the_verified_launch_are_kept_when_asked(opened):
    backend = opened(vadd(n=16))
    backend.keep_outputs = True
    assert backend.run(Work(0, config()), Timeline()).status == "ok"
    assert backend.outputs is not None and np.array_equal(backend.outputs[0], np.arange(16, dtype=np.float32) + 1)
    assert backend.outputs[3] == 16


class Throttled:
    """A throttle watch whose first window says the clocks were held down for power."""

    def __init__(self) -> None:
        self.windows = 0

    def start(self) -> int:
        self.windows += 1
        return self.windows

    def stop(self, window: int) -> frozenset[str]:
        return frozenset({"power"}) if window == 1 else frozenset()

    def close(self) -> None:
        return None


def test_a_throttled_timing_is_timed_once_more(opened):
    watch = Throttled()
    backend = opened(vadd(), throttle=watch)
    result = backend.run(Work(0, config()), Timeline())
    assert result.status == "ok" and result.throttled == "power" and len(result.times_ms) == 5
    assert watch.windows == 2 and backend.launches == 1 + 2 * 5


def ordered(i: int, block: int = 32, trap: int = 0) -> Work:
    return Work(i, {"block_size_x": block, "ID": i, "LOG_SIZE": LOG_SIZE, "TRAP": trap})


def test_retime_warms_each_candidate_up_then_times_rotated_rounds(opened):
    backend = opened(order_problem())
    ids = (3, 5, 8)
    launches = backend.retime(Retime(tuple(ordered(i) for i in ids), rounds=3), Timeline())
    rotated = [ids[(k + r) % 3] for r in range(3) for k in range(3)]
    assert [x.config_id for x in launches] == rotated and all(x.time_ms >= 0 for x in launches)
    # Each warm-up starts from reset arguments: only the last one's entry is left before the rounds.
    log = backend._args[0]
    entries = [ids[-1], *rotated]
    assert int(log[0]) == len(entries) and list(log[1 : 1 + len(entries)]) == entries


def test_retime_gives_nan_to_a_candidate_it_cannot_launch_and_times_the_others(opened, tmp_path):
    backend = opened(order_problem())
    compiled = {1: backend.compiler()(ordered(1))}
    order = Retime((ordered(1), ordered(2, block=2048), ordered(4)), rounds=2)
    timeline = Timeline()
    launches = backend.retime(order, timeline, compiled)
    times = {i: [x.time_ms for x in launches if x.config_id == i] for i in (1, 2, 4)}
    assert all(math.isnan(t) for t in times[2]) and all(t >= 0 for t in times[1] + times[4])
    assert [(row.phase, row.config_id) for row in timeline.rows if row.phase != "other"] == [
        ("compile", 2),
        ("compile", 4),
        ("confirm", -1),
    ]
    assert backend.fatal_error == "" and backend.run(ordered(6), Timeline()).status == "ok"


def test_a_trap_while_timed_again_ends_the_rounds_with_nan(opened):
    backend = opened(order_problem())
    launches = backend.retime(Retime((ordered(0), ordered(1, trap=1), ordered(2)), rounds=2), Timeline())
    assert len(launches) == 6 and all(math.isnan(x.time_ms) for x in launches)
    assert "during the confirmation run" in backend.fatal_error


def test_the_device_is_the_local_rank_modulo_the_visible_ones(tmp_path):
    assert HostGpu(vadd(), str(tmp_path), local_rank=3, devices=2).device_id == 1
    with pytest.raises(UserError, match=r"no host GPU visible to this process \(check HOST_VISIBLE_DEVICES\)"):
        HostGpu(vadd(), str(tmp_path), devices=0)


def test_arguments_that_do_not_fit_are_one_line(tmp_path):
    backend = HostGpu(vadd(), str(tmp_path))
    backend.memory_bytes = 100
    with pytest.raises(UserError, match="the arguments and answers do not fit on host GPU double"):
        backend.prepare()
