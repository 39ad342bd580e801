"""Shared helpers: real mpiexec runs of mpitune and small real C tuning problems."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import leftovers
import pytest

from mpitune.model.identity import ProblemIdentity
from mpitune.store.cache import RunInfo

REPO = Path(__file__).resolve().parent.parent

# A shell that starts the suite as a background job (``pytest ... &`` in a script) hands it
# SIGINT ignored, and an ignored signal stays ignored across exec: every mpirun and rank the
# tests start would then be deaf to the Ctrl-C the interrupt tests send. Catching it here makes
# the children start with the default disposition, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every compile of the suite is a real one, whatever earlier runs (or the user's own) left in the
# kernel cache: tests of compiling (a timeout, a failure, compile_s) must see the compiler. The
# tests of the cache (tests/backends/test_kernel_cache*.py) turn it on, in folders of their own.
os.environ["MPITUNE_KERNEL_CACHE"] = "off"

SCALE_C = r"""
/* y = 2 * x, STEP elements per step. MODE 1 does not compile, MODE 2 computes 3 * x. */
#if MODE == 1
#error "MODE 1 is a configuration that does not compile"
#endif
void scale(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i += STEP)
        for (int u = 0; u < STEP && i + u < n; u++)
            y[i + u] = (MODE == 2 ? 3.0f : 2.0f) * x[i + u];
}
"""


SPIN_C = r"""
#include <time.h>
void spin(float *out, int n)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < SPIN_NSL);
    for (int i = 0; i < n; i++)
        out[i] = (float)(VARIANT % 1 + 1);
}
"""


def spin_c(milliseconds: int) -> str:
    """The C source of a kernel ``spin`` that spins for ``milliseconds`` per call, on the clock
    (not the CPU time it gets), and writes ones: a configuration whose duration is known."""
    return SPIN_C.replace("SPIN_NS", str(milliseconds * 1000000))


SCALE_SPEC = """
import numpy as np

n = 4096
x = np.arange(n, dtype=np.float32)
lang = "C"
kernel_name = "scale"
kernel_source = "scale.c"
arguments = [np.zeros(n, np.float32), x, np.int32(n)]
answer = [2 * x, None, None]
tune_params = {tune_params}
restrictions = {restrictions}
iterations = 3
"""


def mpiexec() -> list[str]:
    """The mpiexec that belongs to this Python's MPI: the venv's (mpich wheel) first.
    ``MPITUNE_MPIEXEC`` may add options (``mpirun --bind-to none``)."""
    local = Path(sys.executable).parent / "mpiexec"
    found = os.environ.get("MPITUNE_MPIEXEC") or (str(local) if local.exists() else shutil.which("mpiexec"))
    if not found:
        pytest.fail("no mpiexec found: install the test extra with the mpich wheel or a system MPI")
    return shlex.split(found)


def mpi_env() -> dict:
    env = dict(os.environ)
    # More ranks than cores: stop mpich's busy polling from starving the ranks that work.
    env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
    env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "16")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def heavy_imports(statement: str, *argv: str) -> list[str]:
    """Which of mpi4py, cupy and h5py a fresh interpreter has loaded after ``statement`` (which
    sees ``argv`` as ``sys.argv[1:]``): the layers promise that importing them pulls in none they
    do not need."""
    code = (
        f"import json, sys; {statement}; "
        "print(json.dumps(sorted(m for m in ('mpi4py', 'cupy', 'h5py') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def mpirun(n: int, args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [*mpiexec(), "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=timeout)


def mpitune(n: int, args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return mpirun(n, ["-m", "mpitune", *args], cwd, timeout)


def start_mpitune(n: int, args: list[str], cwd: Path) -> subprocess.Popen:
    """A tuning job left running in a session of its own, so a test can signal or kill all of it.
    One configuration per rank per batch unless the test says otherwise: a test that acts
    mid-run needs many batches."""
    if "--batch-size" not in args:
        args = [*args, "--batch-size", str(n)]
    return subprocess.Popen(
        [*mpiexec(), "-n", str(n), sys.executable, "-m", "mpitune", *args],
        cwd=cwd,
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_batch(job: subprocess.Popen, batch: int) -> int:
    """Read the job's progress up to the line of BATCH; the configurations done by then."""
    for line in job.stdout:
        if line.startswith(f"mpitune: batch {batch}:"):
            return int(line.split()[3].split("/")[0])  # "mpitune: batch N: DONE/TOTAL configs, ..."
    pytest.fail(f"the job ended before batch {batch}: {job.stderr.read()}")


def file_pid(cache: Path, rank: int) -> int:
    """A rank's process id, as the file's ranks table records it at start-up (read while the
    run writes the file)."""
    import h5py

    with h5py.File(cache, "r", swmr=True) as f:
        rows = f["ranks"][...]
    return int(rows["pid"][rows["rank"] == rank][-1])


def recorded_ids(cache: Path) -> list[int]:
    """The configuration ids of the file's results, one per row."""
    import h5py

    with h5py.File(cache, "r") as f:
        return [int(i) for i in f["results"]["config_id"]]


def check_file(cache: Path) -> str:
    """``mpitune check CACHE``, which must pass; what it printed."""
    command = [sys.executable, "-m", "mpitune", "check", str(cache)]
    proc = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def report_json(cache: Path) -> dict:
    import json

    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", "report", str(cache), "--json"],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def write_scale_spec(
    directory: Path,
    tune_params: str = '{"STEP": [1, 2, 4, 8], "MODE": [0]}',
    restrictions: str = "None",
    extra: str = "",
) -> Path:
    """A small real C problem: 'MODE' 1 fails to compile and 'MODE' 2 gives a wrong answer."""
    (directory / "scale.c").write_text(SCALE_C)
    spec = directory / "spec.py"
    spec.write_text(SCALE_SPEC.format(tune_params=tune_params, restrictions=restrictions) + textwrap.dedent(extra))
    return spec


@pytest.fixture(scope="session")
def cp():
    """CuPy with a CUDA GPU; tests that take it are GPU tests, skipped elsewhere (CI)."""
    cupy = pytest.importorskip("cupy")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver, no device: no GPU here
        count = 0
    if count < 1:
        pytest.skip("no CUDA GPU")
    return cupy


@pytest.fixture
def scale_spec(tmp_path: Path) -> Path:
    return write_scale_spec(tmp_path)


@pytest.fixture(scope="session")
def run_with_failures(tmp_path_factory) -> Path:
    """A cache of 12 configurations tuned on 2 ranks: MODE 1 fails to compile, MODE 2 gives
    wrong answers; every launch timed (no racing), so that each that passed holds all its
    iterations. Read-only for the tests that share it."""
    tmp = tmp_path_factory.mktemp("run_with_failures")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8], "MODE": [0, 1, 2]}', extra="racing = False\n")
    proc = mpitune(2, [str(spec), "--cache", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs a GPU (the ``cp`` fixture, or the GPU run tests)."""
    for item in items:
        if "cp" in getattr(item, "fixturenames", ()) or item.module.__name__ == "test_gpu_runs":
            item.add_marker(pytest.mark.gpu)


# Every process the suite starts inherits this session's id (tests/leftovers.py), marked here,
# before any test starts one.
SESSION = leftovers.mark_session()


@pytest.hookimpl(trylast=True)  # after pytest's own, which runs the fixtures' last finalizers
def pytest_sessionfinish(session, exitstatus):
    """No process the suite started outlives it: one still running is named, killed, and fails
    the session. Under ``mpiexec ... pytest --with-mpi`` every rank's failures count, not only
    rank 0's."""
    left = leftovers.leftovers(SESSION)
    if left:
        report_leftovers(session, left)
        leftovers.kill(left)
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.config.getoption("with_mpi", default=False):
        from mpi4py import MPI

        session.exitstatus = MPI.COMM_WORLD.allreduce(int(session.exitstatus), op=MPI.MAX)


def report_leftovers(session, left: list[leftovers.Leftover]) -> None:
    """One line per process the suite left running, where the summary is printed."""
    lines = [f"{leftovers.MARKER}: process {p.pid} outlived the tests, killed: {p.command}" for p in left]
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        sys.stderr.write("\n".join(lines) + "\n")
        return
    terminal.ensure_newline()
    terminal.write_sep("=", f"{len(left)} process(es) the tests started still ran at the end", red=True, bold=True)
    for line in lines:
        terminal.write_line(line, red=True)


# A small cache problem for the store's tests and the verbs that read its files.
PARAMS = {"bs": [32, 64], "kind": ["a", "b"], "f": [0.5, 1.0]}
IDENTITY = ProblemIdentity(
    kernel_name="k",
    kernel_source="",
    lang="C",
    problem_size=(),
    arguments=(),
    tune_params={k: tuple(v) for k, v in PARAMS.items()},
    restrictions=(),
    iterations=3,
)


def info(**kw):
    base = dict(
        started_unix=1.0,
        ranks=2,
        strategy="brute_force",
        seed=0,
        max_fevals=None,
        time_limit_s=None,
        batch_size=2,
        space_size=8,
        command="cmd",
        version="0",
    )
    base.update(kw)
    return RunInfo(**base)


# The measured data beside the repository, read-only: ../shared/data, with the Kernel Tuner
# caches to develop on (caches/) and those kept for validation (validation/). CI has it beside
# its clone; a checkout without it runs everything else, and the tests that need it skip.
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_caches() -> Path:
    """The folder of real Kernel Tuner caches (``*.json.gz``); skips the test where it is absent."""
    caches = SHARED_DATA / "caches"
    if not caches.is_dir():
        pytest.skip(f"the shared measured caches are not beside this checkout ({caches})")
    return caches


@pytest.fixture(scope="session")
def pnpoly(shared_caches: Path) -> Path:
    """pnpoly on an RTX 3090, the shared cache most tests read: complete (every configuration of
    its space measured, 4092, 3774 of them passing)."""
    return shared_caches / "pnpoly_RTX_3090.json.gz"


def kt_cache(path, dangling=False, gz=False):
    """A small Kernel Tuner cache with every kind of entry, written as Kernel Tuner writes it."""
    entries = {
        "1,1": {
            "x": 1,
            "y": 1,
            "time": 2.0,
            "times": [2.1, 2.0, 1.9],
            "compile_time": 100.0,
            "verification_time": 5.0,
            "benchmark_time": 20.0,
        },
        "1,2": {
            "x": 1,
            "y": 2,
            "time": 1.0,
            "times": [1.0, 1.0, 1.0],
            "compile_time": 200.0,
            "verification_time": 5.0,
            "benchmark_time": 10.0,
        },
        "2,1": {"x": 2, "y": 1, "time": "CompilationFailedConfig", "compile_time": 50.0},
        "2,2": {"x": 2, "y": 2, "time": "RuntimeFailedConfig", "compile_time": 80.0, "benchmark_time": 1.0},
        "3,1": {"x": 3, "y": 1, "time": "InvalidConfig"},
        "3,2": {"x": 3, "y": 2, "__error__": "illegal memory access", "compile_time": 10.0},
    }
    head = {
        "device_name": "Test GPU",
        "kernel_name": "k",
        "problem_size": [64, 64],
        "tune_params_keys": ["x", "y"],
        "tune_params": {"x": [1, 2, 3], "y": [1, 2]},
        "objective": "time",
    }
    text = json.dumps(head)[:-1] + ', "cache": {\n'
    text += ",\n".join(f'"{k}": {json.dumps(v)}' for k, v in entries.items())
    text += ",\n" if dangling else "}\n}"
    opener = gzip.open if gz else open
    with opener(path, "wt") as fh:
        fh.write(text)
    return path


def scale_prior(path: Path, kernel_name: str = "scale", device: str = "Other CPU", params: str = "STEP") -> Path:
    """A Kernel Tuner cache of ``scale`` measured elsewhere, to start a search from: ``params``
    (``STEP`` shared with the scale spec, anything else not) with values 1, 2, 4 and 16 (8 and
    16 each in one space only), beside a parameter ``U`` the spec lacks; STEP 2 with U 1 failed."""
    entries = {}
    for step in (1, 2, 4, 16):
        for u in (0, 1):
            time: float | str = "CompilationFailedConfig" if (step, u) == (2, 1) else 10.0 / step + u
            entries[f"{step},{u}"] = {
                params: step,
                "U": u,
                "time": time,
                "times": [] if isinstance(time, str) else [time],
            }
    document = {
        "kernel_name": kernel_name,
        "device_name": device,
        "problem_size": [4096],
        "tune_params_keys": [params, "U"],
        "tune_params": {params: [1, 2, 4, 16], "U": [0, 1]},
        "cache": entries,
    }
    path.write_text(json.dumps(document))
    return path


def write_kt_times(
    path: Path,
    device: str,
    times: dict[tuple, object],
    names: tuple[str, ...] = ("x", "y"),
    kernel: str = "conv",
    problem_size: tuple[int, ...] = (64, 64),
) -> Path:
    """A Kernel Tuner cache of ``times`` (a configuration's values in ``names`` order -> its time
    in ms, or a failure's marker such as "RuntimeFailedConfig"), as Kernel Tuner's writer leaves
    it: inf as Infinity, three launches where the time is finite, none for a failure; gzip where
    the name ends in .gz. Each parameter's values are those the configurations use."""

    def finite(t: object) -> bool:
        return isinstance(t, float) and t == t and abs(t) != float("inf")

    cache = {
        ",".join(map(str, config)): {**dict(zip(names, config)), "time": t, "times": [t] * 3 if finite(t) else []}
        for config, t in times.items()
    }
    doc = {
        "device_name": device,
        "kernel_name": kernel,
        "problem_size": list(problem_size),
        "tune_params_keys": list(names),
        "tune_params": {n: sorted({config[i] for config in times}) for i, n in enumerate(names)},
        "objective": "time",
        "cache": cache,
    }
    with (gzip.open if path.name.endswith(".gz") else open)(path, "wt") as fh:
        fh.write(json.dumps(doc))
    return path


def run_script(script: Path, *args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A script of benchmarks/ run as a user runs it from a checkout (``PYTHONPATH`` the repository)."""
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
