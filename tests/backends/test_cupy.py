"""The CuPy backend: launch geometry and checks everywhere, compiling and timing on a real GPU.

Tests that take the ``cp`` fixture skip where CuPy or a CUDA GPU is missing (CI); the
rest run on any machine and prove that nothing here needs a GPU to be checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_compare import MESSAGES

from mpitune.backends.cupy import create
from mpitune.backends.cupy.compiling import nvrtc_options
from mpitune.backends.cupy.device_errors import classify
from mpitune.backends.cupy.verification import ROW, GpuCheck
from mpitune.backends.gpu.failures import Failure
from mpitune.backends.gpu.geometry import block_dims, grid_dims
from mpitune.errors import UserError
from mpitune.model.problem import Kernel
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work

DEFAULT_NAMES = ["block_size_x", "block_size_y", "block_size_z"]
NO_DIV = {"x": None, "y": None, "z": None}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def problem(
    source: str, kernel_name: str, arguments: list, answer: list | None, tune_params: dict, problem_size=(1,), **kw
) -> Kernel:
    kw.setdefault("grid_div", dict(NO_DIV))
    kw.setdefault("iterations", 5)
    return Kernel(
        spec_path="test_cupy",
        kernel_name=kernel_name,
        kernel_source=source,
        lang="cupy",
        problem_size=tuple(problem_size),
        arguments=arguments,
        answer=answer,
        atol=kw.pop("atol", 1e-6),
        tune_params=tune_params,
        **kw,
    )


# ------------------------------------------------------------------------------------
# Without a GPU
# ------------------------------------------------------------------------------------


def test_nvrtc_makes_a_cubin_for_a_known_gpu_and_ptx_for_a_newer_one():
    assert nvrtc_options([], 90, (80, 90), "/inc") == (("-arch=sm_90", "-ftz=true", "-I/inc"), "cubin")
    assert nvrtc_options([], 100, (80, 90), "/inc") == (("-arch=compute_90", "-ftz=true", "-I/inc"), "ptx")
    assert nvrtc_options(["-arch=sm_80", "--ftz=false"], 90, (80, 90), "/inc") == (
        ("-arch=sm_80", "--ftz=false", "-I/inc"),
        "cubin",
    )


class CudaError(Exception):
    """Shaped as CuPy's CUDA errors are: the error number in ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def test_cuda_failures_are_classified_by_their_code_and_a_round_trip():
    def unreachable() -> bool:
        raise AssertionError("a sticky code needs no round trip")

    assert classify(CudaError(700, "illegal address"), unreachable) is Failure.CONTEXT_LOST
    assert classify(CudaError(701, "too many resources"), lambda: True) is Failure.LAUNCH
    assert classify(CudaError(701, "too many resources"), lambda: False) is Failure.CONTEXT_LOST
    assert classify(RuntimeError("odd"), lambda: True) is Failure.RUNTIME
    assert [f.status for f in Failure] == ["runtime_error", "launch_error", "runtime_error"]


def _vadd_problem(**kw) -> Kernel:
    a = np.ones(16, np.float32)
    return problem(
        VADD,
        "vadd",
        [np.zeros_like(a), a, a, np.int32(16)],
        None,
        kw.pop("tune_params", {"block_size_x": [32, 64]}),
        (16,),
        **kw,
    )


def test_missing_cupy_is_one_line_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(UserError, match="pip install cupy-cuda12x") as info:
        create(_vadd_problem(), str(tmp_path), 0)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------

VADD = r"""
extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
#if BROKEN
    this is not C++;
#endif
#if WRONG
    if (i < n) c[i] = a[i] - b[i];
#elif SKIP
    /* writes nothing: must fail, whatever an earlier configuration left in c */
#else
    if (i < n) c[i] = a[i] + b[i];
#endif
}
"""

TEMPLATED = r"""
template <typename T>
__global__ void vadd_t(T *c, const T *a, const T *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
// C++ linkage without a template: found through its name expression as well.
__global__ void vadd_cpp(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""

GEOMETRY = r"""
extern "C" __global__ void geometry(int *out) {
    if (blockIdx.x + blockIdx.y + blockIdx.z + threadIdx.x + threadIdx.y + threadIdx.z == 0) {
        out[0] = gridDim.x;  out[1] = gridDim.y;  out[2] = gridDim.z;
        out[3] = blockDim.x; out[4] = blockDim.y; out[5] = blockDim.z;
        out[6] = grid_size_x; out[7] = grid_size_y; out[8] = grid_size_z;
    }
}
"""

SPIN = r"""
extern "C" __global__ void spin(int *out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < SPIN_NS);
    if (threadIdx.x == 0) out[0] = 1;
}
"""


def measure(p: Kernel, configs: list[dict], tmp_path) -> tuple[list, Timeline, object]:
    backend = create(p, str(tmp_path), 0)
    backend.prepare()
    timeline = Timeline()
    try:
        return [backend.run(Work(i, c), timeline) for i, c in enumerate(configs)], timeline, backend
    finally:
        backend.close()


def vadd(n: int = 1_000_003, **kw) -> Kernel:
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    return problem(
        kw.pop("source", VADD),
        kw.pop("kernel_name", "vadd"),
        [np.zeros(n, np.float32), a, b, np.int32(n)],
        [a + b, None, None, None],
        kw.pop("tune_params", {"block_size_x": [64, 256, 1000]}),
        (n,),
        **kw,
    )


def statuses(results) -> list[str]:
    return [r.status for r in results]


def test_ok_configurations_are_verified_and_timed_with_events(cp, tmp_path):
    results, timeline, backend = measure(vadd(), [{"block_size_x": b} for b in (64, 256, 1000)], tmp_path)
    assert statuses(results) == ["ok"] * 3, [r.error for r in results]
    for r in results:
        assert len(r.times_ms) == 5 and all(t > 0 for t in r.times_ms)
        assert r.time_ms == pytest.approx(float(np.median(r.times_ms)))
        assert r.compile_s > 0 and r.verify_s > 0 and r.benchmark_s > 0
    phases = [(row.config_id, row.phase) for row in timeline.rows if row.phase != "other"]
    assert phases == [(i, p) for i in range(3) for p in ("compile", "verify", "benchmark")]
    assert backend.device_name and backend.device_name != "unknown"
    assert backend.stream.ptr != 0  # its own stream, not the legacy default stream


def test_wrong_answers_and_unwritten_outputs_fail_verification(cp, tmp_path):
    p = vadd(tune_params={"block_size_x": [256], "WRONG": [0, 1], "SKIP": [0, 1]})
    configs = [{"block_size_x": 256, "WRONG": w, "SKIP": s} for w, s in ((0, 0), (1, 0), (0, 1), (0, 0))]
    results, _, _ = measure(p, configs, tmp_path)
    assert statuses(results) == ["ok", "verify_failed", "verify_failed", "ok"]
    assert "differ by more than atol" in results[1].error
    assert results[1].times_ms == () and np.isnan(results[1].time_ms)


@pytest.mark.parametrize("outputs, answer, atol, message", MESSAGES)
def test_the_gpu_check_gives_the_hosts_messages(cp, outputs, answer, atol, message):
    stream = cp.cuda.Stream(non_blocking=True)
    on_gpu = [cp.asarray(o) if isinstance(o, np.ndarray) else o for o in outputs]
    answers = None if answer is None else [None if a is None else cp.asarray(a) for a in answer]
    check = GpuCheck(cp, stream, answers, atol)
    check.warm_up(on_gpu)
    assert check.mismatch(on_gpu) == message


def test_nan_output_fails_verification(cp, tmp_path):
    n = 1024
    source = r'extern "C" __global__ void nan_out(float *x) { x[threadIdx.x + blockIdx.x * blockDim.x] = 0.0f / 0.0f; }'
    p = problem(
        source,
        "nan_out",
        [np.zeros(n, np.float32)],
        [np.zeros(n, np.float32)],
        {"block_size_x": [256]},
        (n,),
        atol=1e30,
    )
    results, _, _ = measure(p, [{"block_size_x": 256}], tmp_path)
    assert statuses(results) == ["verify_failed"]


def test_compile_errors_keep_a_short_log_and_the_run_goes_on(cp, tmp_path):
    p = vadd(tune_params={"block_size_x": [256], "BROKEN": [0, 1]})
    results, _, _ = measure(p, [{"block_size_x": 256, "BROKEN": 1}, {"block_size_x": 256, "BROKEN": 0}], tmp_path)
    assert statuses(results) == ["compile_error", "ok"]
    assert "error" in results[0].error and len(results[0].error.splitlines()) <= 13
    assert results[0].compile_s > 0


def test_unknown_kernel_name_is_a_compile_error(cp, tmp_path):
    results, _, _ = measure(vadd(kernel_name="no_such_kernel"), [{"block_size_x": 256}], tmp_path)
    assert statuses(results) == ["compile_error"]


def test_impossible_launches_are_launch_errors_and_the_context_survives(cp, tmp_path):
    results, _, _ = measure(
        vadd(tune_params={"block_size_x": [2048, 256]}), [{"block_size_x": 2048}, {"block_size_x": 256}], tmp_path
    )
    assert statuses(results) == ["launch_error", "ok"]
    assert "2048 threads" in results[0].error


def test_block_z_beyond_the_device_limit_is_a_launch_error(cp, tmp_path):
    out = np.zeros(9, np.int32)
    p = problem(GEOMETRY, "geometry", [out], None, {"block_size_z": [128]}, (1, 1, 128))
    results, _, _ = measure(p, [{"block_size_z": 128}], tmp_path)
    assert statuses(results) == ["launch_error"]


def test_templated_and_cpp_linkage_kernels(cp, tmp_path):
    for name in ("vadd_t<float>", "vadd_cpp"):
        results, _, _ = measure(
            vadd(source=TEMPLATED, kernel_name=name, tune_params={"block_size_x": [128]}),
            [{"block_size_x": 128}],
            tmp_path,
        )
        assert statuses(results) == ["ok"], (name, results[0].error)


@pytest.mark.parametrize(
    "size, config, grid_div, names",
    [
        ((1000, 300), {"block_size_x": 32, "block_size_y": 4}, NO_DIV, DEFAULT_NAMES),
        (
            (1000, 300),
            {"block_size_x": 32, "block_size_y": 4, "tile": 4},
            {"x": ["block_size_x", "tile"], "y": "block_size_y*tile*2", "z": None},
            DEFAULT_NAMES,
        ),
        ((1000,), {"block_size_x": 32}, {"x": "block_size_x / 2.5", "y": None, "z": None}, DEFAULT_NAMES),
        ((64, 64, 10), {"bx": 16, "by": 8}, NO_DIV, ["bx", "by"]),
    ],
)
def test_launch_geometry_on_the_gpu(cp, tmp_path, size, config, grid_div, names):
    grid = grid_dims(size, config, grid_div, names)
    block = block_dims(config, names)
    expected = np.array(grid + block + grid, np.int32)
    p = problem(
        GEOMETRY,
        "geometry",
        [np.zeros(9, np.int32)],
        [expected],
        {k: [v] for k, v in config.items()},
        size,
        grid_div=grid_div,
        block_size_names=names,
    )
    results, _, _ = measure(p, [config], tmp_path)
    assert statuses(results) == ["ok"], results[0].error


def test_event_times_match_a_kernel_of_known_duration(cp, tmp_path):
    p = problem(
        SPIN,
        "spin",
        [np.zeros(1, np.int32)],
        [np.ones(1, np.int32)],
        {"SPIN_NS": [2_000_000], "block_size_x": [32]},
        (32,),
        iterations=4,
    )
    results, _, _ = measure(p, [{"SPIN_NS": 2_000_000, "block_size_x": 32}], tmp_path)
    (r,) = results
    assert r.status == "ok", r.error
    assert len(r.times_ms) == 4
    assert all(1.95 <= t <= 3.0 for t in r.times_ms), r.times_ms
    assert r.benchmark_s >= 4 * 0.00195


def test_device_follows_the_local_rank(cp, tmp_path):
    count = cp.cuda.runtime.getDeviceCount()
    backend = create(vadd(n=16), str(tmp_path), local_rank=1)
    try:
        assert backend.device_id == 1 % count
        assert backend.device_uuid == "" or backend.device_uuid.startswith("GPU-")
    finally:
        backend.close()
        cp.cuda.Device(0).use()


ILLEGAL_ADDRESS = textwrap.dedent(r"""
    import numpy as np
    from mpitune.backends.cupy import create
    from mpitune.backends.gpu.failures import DeviceLostError
    from mpitune.model.problem import Kernel
    from mpitune.model.timeline import Timeline
    from mpitune.model.work import Work

    src = 'extern "C" __global__ void bad(float *x) { x[threadIdx.x + ((size_t)1 << 40)] = 1.0f; }'
    p = Kernel(spec_path="t", kernel_name="bad", kernel_source=src, lang="cupy", problem_size=(32,),
                arguments=[np.zeros(32, np.float32)], answer=None, atol=1e-6,
                tune_params={"block_size_x": [32]}, grid_div={"x": None, "y": None, "z": None})
    backend = create(p, ".", 0)
    backend.prepare()
    r = backend.run(Work(0, {"block_size_x": 32}), Timeline())
    print("STATUS", r.status)
    print("ERROR", r.error)
    try:
        backend.run(Work(1, {"block_size_x": 32}), Timeline())
        print("NOT RAISED")
    except DeviceLostError as exc:
        print("LOST", exc)
    backend.close()
""")


def in_a_child(script: str, cwd) -> subprocess.CompletedProcess:
    """Run ``script`` in a Python process of its own, which must succeed: an error that poisons
    the CUDA context poisons it for the whole process, so it cannot be this one."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=cwd, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_illegal_address_is_recorded_then_the_rank_refuses_to_go_on(cp, tmp_path):
    proc = in_a_child(ILLEGAL_ADDRESS, tmp_path)
    assert "STATUS runtime_error" in proc.stdout, proc.stdout
    assert "LOST" in proc.stdout and "NOT RAISED" not in proc.stdout
    assert "illegal" in proc.stdout.lower()


# ------------------------------------------------------------------------------------
# Kernel Tuner's kernel forms: constant memory, dynamic shared memory, templates, defines
# ------------------------------------------------------------------------------------

FORMS = r"""
__constant__ float coeff[2];
namespace table { __constant__ float offset[1]; }

template <typename T, int TILE>
__global__ void axpb(T *y, const T *x, int n) {
    extern __shared__ float staged[];  // dynamic: SMEM_FLOATS per block
    int base = (blockIdx.x * blockDim.x) * TILE + threadIdx.x;
    for (int t = 0; t < TILE; t++) {
        int i = base + t * blockDim.x;
        staged[threadIdx.x % SMEM_FLOATS] = (i < n) ? x[i] : 0.0f;
        __syncthreads();
        if (i < n) y[i] = coeff[0] * staged[threadIdx.x % SMEM_FLOATS] + coeff[1] + table::offset[0];
        __syncthreads();
    }
}
"""


def forms(n: int = 100_003, **kw) -> Kernel:
    from mpitune.model.kernel_extras import KernelExtras

    x = np.arange(n, dtype=np.float32)
    cmem = {"coeff": np.array([2.0, 3.0], np.float32), "table::offset": np.array([0.5], np.float32)}
    return problem(
        FORMS,
        "axpb<float, tile>",
        [np.zeros(n, np.float32), x, np.int32(n)],
        [2 * x + 3.5, None, None],
        {"block_size_x": [128, 256], "tile": [1, 4]},
        (n,),
        grid_div={"x": ["block_size_x", "tile"], "y": None, "z": None},
        extras=KernelExtras(cmem=cmem),
        **kw,
    )


def test_constant_memory_templates_dynamic_shared_memory_and_defines(cp, tmp_path):
    from mpitune.model.kernel_extras import Derived

    configs = [
        {"block_size_x": 128, "tile": 1},
        {"block_size_x": 256, "tile": 4},
        {"block_size_x": 256, "tile": 4},
        {"block_size_x": 128, "tile": 4},
    ]
    derived = [
        Derived({"SMEM_FLOATS": "128"}, 128 * 4),
        Derived({"SMEM_FLOATS": "256"}, 256 * 4),
        Derived({"SMEM_FLOATS": "16384"}, 16384 * 4),  # 64 KiB: past the 48 KiB a launch gets unasked
        Derived({"SMEM_FLOATS": "128"}, 1 << 20),
    ]  # 1 MiB: more than any GPU has
    backend = create(forms(), str(tmp_path), 0)
    backend.prepare()
    try:
        results = [backend.run(Work(i, c, d), Timeline()) for i, (c, d) in enumerate(zip(configs, derived))]
    finally:
        backend.close()
    assert statuses(results) == ["ok", "ok", "ok", "launch_error"], [r.error for r in results]
    assert "1048576 of dynamic" in results[3].error


def test_only_the_spec_defines_exist_when_it_gives_them(cp, tmp_path):
    from mpitune.model.kernel_extras import Derived

    source = FORMS.replace("SMEM_FLOATS", "(block_size_x)")  # not defined: the spec's defines replace the defaults
    arguments = [np.zeros(8, np.float32), np.ones(8, np.float32), np.int32(8)]
    backend = create(problem(source, "axpb<float, 1>", arguments, None, {"block_size_x": [8]}, (8,)), str(tmp_path), 0)
    backend.prepare()
    try:
        got = backend.run(Work(0, {"block_size_x": 8}, Derived({"OTHER": "1"}, 64)), Timeline())
    finally:
        backend.close()
    assert got.status == "compile_error" and "block_size_x" in got.error


def test_configurations_compiled_ahead_by_workers_run_like_those_compiled_in_turn(cp, tmp_path):
    from mpitune.model.kernel_extras import Derived
    from mpitune.model.timeline import Clock
    from mpitune.process.compile_ahead import CompileAhead

    configs = [{"block_size_x": b, "tile": t} for b in (128, 256) for t in (1, 4)]
    derived = [Derived({"SMEM_FLOATS": str(c["block_size_x"])}, c["block_size_x"] * 4) for c in configs]
    backend = create(forms(), str(tmp_path), 0)
    backend.prepare()
    ahead = CompileAhead(2, Clock(), backend.compiler())
    try:
        ahead.submit([Work(i, c, d) for i, (c, d) in enumerate(zip(configs, derived))])
        compiled = [ahead.take(Work(i, c, d), 120) for i, (c, d) in enumerate(zip(configs, derived))]
        early = [
            backend.run(Work(i, c, d), Timeline(), k) for i, (c, d, k) in enumerate(zip(configs, derived, compiled))
        ]
        in_turn = [backend.run(Work(i, c, d), Timeline()) for i, (c, d) in enumerate(zip(configs, derived))]
    finally:
        ahead.close()
        backend.close()
    assert statuses(early) == statuses(in_turn) == ["ok"] * 4, [r.error for r in early + in_turn]
    assert all(k.artifact and k.compile_s > 0 for k in compiled)
    # Compiled elsewhere: the rank only loaded it, far faster than NVRTC.
    assert sum(r.compile_s for r in early) >= sum(k.compile_s for k in compiled)


@pytest.mark.parametrize("wrong_at", [[], [0], [ROW - 1, ROW, 3 * ROW + 4], [3 * ROW + 1]])
def test_a_large_output_is_counted_by_rows_and_tail_as_the_host_counts_it(cp, wrong_at):
    from mpitune.backends.compare import mismatch

    answer = np.arange(3 * ROW + 5, dtype=np.float32)
    got = answer.copy()
    got[wrong_at] += 1.0
    if wrong_at:
        got[wrong_at[-1]] = np.nan  # a NaN never matches, in a row or in the tail
    stream = cp.cuda.Stream(non_blocking=True)
    check = GpuCheck(cp, stream, [cp.asarray(answer)], 0.5)
    on_gpu = [cp.asarray(got)]
    check.warm_up(on_gpu)
    assert check.mismatch(on_gpu) == mismatch(np, [got], [answer], 0.5)
    assert (check.mismatch(on_gpu) == "") == (not wrong_at)
