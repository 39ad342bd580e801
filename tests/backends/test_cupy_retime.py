"""Confirmation on a GPU: candidates loaded at once and timed again interleaved with events.

Every test here needs CuPy and a CUDA GPU (the ``cp`` fixture; marked ``gpu``, which CI skips).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from test_cupy import in_a_child, problem, vadd

from mpitune.backends.cupy import create
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

pytestmark = pytest.mark.gpu

# Each launch appends its ID to the log (log[0] counts the entries): the order of the launches,
# seen from the GPU. The log is reset with the other arguments before each warm-up only.
ORDER = r"""
extern "C" __global__ void order(int *log) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        int k = atomicAdd(&log[0], 1);
        if (k + 1 < LOG_SIZE) log[k + 1] = ID;
    }
}
"""
LOG_SIZE = 64


def retimed(p, order: Retime, tmp_path, compiled=None) -> tuple[list[Launch], Timeline, object]:
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    timeline = Timeline()
    try:
        launches = backend.retime(order, timeline, compiled)
        return launches, timeline, backend
    finally:
        backend.close()


def times(launches: list[Launch], config_id: int) -> list[float]:
    return [x.time_ms for x in launches if x.config_id == config_id]


def finite(values: list[float]) -> bool:
    return bool(values) and all(math.isfinite(t) and t > 0 for t in values)


def test_each_candidate_is_timed_once_per_round_with_events(cp, tmp_path):
    # Three rounds: none can be dropped as clearly slower before a fourth (DROP_AFTER_ROUNDS).
    order = Retime(tuple(Work(i, {"block_size_x": b}) for i, b in enumerate((64, 256, 1000))), rounds=3)
    launches, timeline, backend = retimed(vadd(), order, tmp_path)
    assert len(launches) == 9 and finite([x.time_ms for x in launches])
    assert sorted((x.round, x.config_id) for x in launches) == [(r, i) for r in range(3) for i in range(3)]
    phases = [(row.phase, row.config_id) for row in timeline.rows if row.phase != "other"]
    assert phases == [("compile", 0), ("compile", 1), ("compile", 2), ("confirm", -1)]
    assert backend.fatal_error == ""


def test_the_gpu_sees_one_warm_up_each_then_the_rotated_rounds(cp, tmp_path):
    ids = (3, 5, 8)
    p = problem(
        ORDER,
        "order",
        [np.zeros(LOG_SIZE, np.int32)],
        None,
        {"block_size_x": [32], "ID": list(ids), "LOG_SIZE": [LOG_SIZE]},
        (32,),
    )
    order = Retime(tuple(Work(i, {"block_size_x": 32, "ID": i, "LOG_SIZE": LOG_SIZE}) for i in ids), rounds=3)
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    try:
        launches = backend.retime(order, Timeline())
        log = cp.asnumpy(backend._args[0])
    finally:
        backend.close()
    rotated = [ids[(k + r) % 3] for r in range(3) for k in range(3)]
    assert [x.config_id for x in launches] == rotated
    assert [x.round for x in launches] == [r for r in range(3) for _ in range(3)]
    # Each warm-up starts from reset arguments: only the last one's entry is left before the rounds.
    entries = [ids[-1], *rotated]
    assert int(log[0]) == len(entries) and list(log[1 : 1 + len(entries)]) == entries


def test_a_candidate_that_does_not_compile_gets_nan_and_the_others_are_timed(cp, tmp_path):
    p = vadd(tune_params={"block_size_x": [256], "BROKEN": [0, 1]})
    order = Retime(tuple(Work(i, {"block_size_x": 256, "BROKEN": b}) for i, b in enumerate((0, 1, 0))), rounds=3)
    launches, _, _ = retimed(p, order, tmp_path)
    assert len(launches) == 9
    assert all(math.isnan(t) for t in times(launches, 1))
    assert finite(times(launches, 0)) and finite(times(launches, 2))


def test_an_impossible_launch_gets_nan_and_the_context_survives(cp, tmp_path):
    p = vadd(tune_params={"block_size_x": [2048, 256]})
    order = Retime((Work(0, {"block_size_x": 2048}), Work(1, {"block_size_x": 256})), rounds=3)
    launches, _, backend = retimed(p, order, tmp_path)
    assert len(launches) == 6
    assert all(math.isnan(t) for t in times(launches, 0)) and finite(times(launches, 1))
    assert backend.fatal_error == ""


def test_candidates_compiled_ahead_are_only_loaded(cp, tmp_path):
    p = vadd()
    work = tuple(Work(i, {"block_size_x": b}) for i, b in enumerate((64, 256)))
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    timeline = Timeline()
    try:
        compiled = {w.config_id: backend.compiler()(w) for w in work}
        launches = backend.retime(Retime(work, rounds=2), timeline, compiled)
        # And a run after it measures as before.
        result = backend.run(Work(9, {"block_size_x": 128}), Timeline())
    finally:
        backend.close()
    assert finite([x.time_ms for x in launches])
    assert [row.phase for row in timeline.rows if row.phase != "other"] == ["confirm"]
    assert result.status == "ok", result.error


LOST_CONTEXT = textwrap.dedent(r"""
    import math
    import numpy as np
    from mpitune.backends.cupy import create
    from mpitune.model.work import Retime
    from mpitune.model.problem import Kernel
    from mpitune.model.timeline import Timeline
    from mpitune.model.work import Work

    src = '''extern "C" __global__ void maybe_bad(float *x) {
    #if BAD
        x[threadIdx.x + ((size_t)1 << 40)] = 1.0f;
    #else
        x[threadIdx.x] = 1.0f;
    #endif
    }'''
    p = Kernel(spec_path="t", kernel_name="maybe_bad", kernel_source=src, lang="cupy", problem_size=(32,),
                arguments=[np.zeros(32, np.float32)], answer=None, atol=1e-6,
                tune_params={"block_size_x": [32], "BAD": [0, 1]}, grid_div={"x": None, "y": None, "z": None})
    backend = create(p, ".", 0)
    backend.prepare()
    order = Retime(tuple(Work(i, {"block_size_x": 32, "BAD": b}) for i, b in enumerate((0, 1, 0))), rounds=2)
    launches = backend.retime(order, Timeline())
    print("COUNT", len(launches))
    print("NAN", sum(math.isnan(x.time_ms) for x in launches))
    print("FATAL", backend.fatal_error)
    again = backend.retime(order, Timeline())
    print("AGAIN", len(again), sum(math.isnan(x.time_ms) for x in again))
    backend.close()
""")


def test_a_lost_context_gives_nan_for_the_rest_and_marks_the_backend(cp, tmp_path):
    proc = in_a_child(LOST_CONTEXT, tmp_path)
    assert "COUNT 6" in proc.stdout and "NAN 6" in proc.stdout, proc.stdout
    fatal = next(line for line in proc.stdout.splitlines() if line.startswith("FATAL"))
    assert "illegal" in fatal.lower(), proc.stdout
    assert "AGAIN 6 6" in proc.stdout, proc.stdout
