"""The measuring worker started before MPI and the spec: used once its problem comes, ended when
none comes or it warmed up the wrong device, with real processes and a real mpiexec."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import h5py
import pytest
from conftest import mpi_env, mpiexec, write_scale_spec

from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.process.compile_ahead import CompileAhead, default_workers
from mpitune.process.isolation import WORKER_START_PHASE, IsolatedBackend
from mpitune.process.prewarm import spawn_worker
from mpitune.scheduling import before_mpi
from mpitune.spec.load import load_spec
from mpitune.spec.peek import named_lang

MARK = "MPITUNE_TEST_MARK"  # inherited by every process a job starts: how to find its leftovers


def marked(mark: str) -> list[int]:
    """The processes, still running, whose environment holds ``MARK=mark``: mpitune's, not
    Python's resource tracker (which the compile workers' queues start and which ends once
    the processes that share it have)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours
            continue
        if f"{MARK}={mark}".encode() in env.split(b"\0") and state != "Z" and b"resource_tracker" not in command:
            pids.append(int(entry.name))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def job(n: int, args: list[str], cwd: Path, wrap: str = "", **env: str) -> tuple[subprocess.CompletedProcess, str]:
    """``mpiexec -n N python -m mpitune ARGS`` (each rank under ``sh -c WRAP`` when given), its
    processes marked; the result and the mark."""
    mark = uuid.uuid4().hex
    command = [sys.executable, "-m", "mpitune", *args]
    if wrap:
        command = ["sh", "-c", f'{wrap}; exec "$@"', "sh", *command]
    proc = subprocess.run(
        [*mpiexec(), "-n", str(n), *command],
        cwd=cwd,
        env={**mpi_env(), **env, MARK: mark},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, mark


def logged_pids(stderr: str, pattern: str) -> dict[int, int]:
    """Rank -> the process id a log line of each rank names (``(?P<pid>...)`` in ``pattern``)."""
    found = {}
    for line in stderr.splitlines():
        m = re.search(r" rank (\d+) INFO .*" + pattern, line)
        if m:
            found[int(m.group(1))] = int(m.group("pid"))
    return found


def worker_starts(cache: Path) -> dict[int, tuple[float, float]]:
    """Rank -> (start, end) of its worker_start phase, on the run's clock."""
    with h5py.File(cache, "r") as f:
        rows = f["timeline"][...]
    mine = rows[rows["phase"] == WORKER_START_PHASE.encode()]
    return {int(r["rank"]): (float(r["start_s"]), float(r["end_s"])) for r in mine}


def spec_phase(cache: Path) -> tuple[float, float]:
    with h5py.File(cache, "r") as f:
        rows = f["timeline"][...]
    (row,) = rows[rows["phase"] == b"spec"]
    return float(row["start_s"]), float(row["end_s"])


# -- what is decided before MPI ---------------------------------------------------------------


@pytest.mark.parametrize(
    "source, lang",
    [
        ('lang = "C"\n', "C"),
        ("x: int = 1\nlang: str = 'cuda'\n", "cuda"),
        ("import numpy as np\n", "cupy"),  # Kernel Tuner's default
        ('lang = "C"\nlang = "cupy"\n', "cupy"),  # the last assignment wins, as when it runs
        ("lang = 'c'.upper()\n", None),  # computed: only running the spec says
        ('from settings import *\nlang = "C"\n', None),
        ('lang = "C"\nsimulation_mode = True\n', None),  # a replay runs nothing in a worker
        ('lang = "C"\nsimulation_mode = False\n', "C"),
        ("lang = (\n", None),  # the spec loader says what is wrong with it
    ],
)
def test_the_backend_is_read_from_the_spec_without_running_it(tmp_path, source, lang):
    spec = tmp_path / "spec.py"
    spec.write_text("import sys\nsys.exit(3)\n" + source)  # never run
    assert named_lang(str(spec)) == lang


def test_a_missing_spec_starts_nothing(tmp_path):
    assert named_lang(str(tmp_path / "nothing.py")) is None


def test_the_launchers_local_rank_comes_first_and_slurms_last():
    assert before_mpi.launcher_local_rank({}) == 0  # no launcher: MPI's world of one
    assert before_mpi.launcher_local_rank({"PMI_RANK": "3"}) is None  # a launcher that does not say
    assert before_mpi.launcher_local_rank({"SLURM_LOCALID": "0", "MPI_LOCALRANKID": "3"}) == 3
    assert before_mpi.launcher_local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "MPI_LOCALRANKID": "3"}) == 2
    assert before_mpi.launcher_local_rank({"SLURM_LOCALID": "1", "PMI_LOCAL_RANK": ""}) == 1


def test_the_job_wide_rank_comes_from_the_launcher_before_mpi():
    assert before_mpi.launcher_world_rank({}) == 0  # no launcher: a world of one
    assert before_mpi.launcher_world_rank({"PMI_RANK": "3", "SLURM_PROCID": "0"}) == 3  # mpirun in a batch job
    assert before_mpi.launcher_world_rank({"OMPI_COMM_WORLD_RANK": "0"}) == 0
    assert before_mpi.launcher_world_rank({"PMI_SIZE": "4"}) is None  # launched, but which rank is not said


def test_the_ranks_on_a_node_come_from_the_launcher():
    assert before_mpi.launcher_local_size({}) == 1
    assert before_mpi.launcher_local_size({"PMI_RANK": "0", "MPI_LOCALNRANKS": "4"}) == 4
    assert before_mpi.launcher_local_size({"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MPI_LOCALNRANKS": "4"}) == 2
    assert before_mpi.launcher_local_size({"SLURM_PROCID": "1"}) is None


# -- the worker, in this process's children ---------------------------------------------------


def test_a_worker_spawned_before_its_problem_measures_it(tmp_path):
    problem, _ = load_spec(str(write_scale_spec(tmp_path)))
    spawned = spawn_worker(problem.kernel.lang, 0)
    clock = Clock()  # started after the spawn, as the run's clock starts after an early one
    timeline = Timeline(clock)
    backend = IsolatedBackend(problem.kernel, str(tmp_path), clock, local_rank=0, spawned=spawned, timeline=timeline)
    try:
        assert backend.worker.pids == [spawned.pid]
        (row,) = [r for r in timeline.rows if r.phase == WORKER_START_PHASE]
        assert row.start_s < 0 and row.end_s >= row.start_s  # spawned before the clock started
        result = backend.run(Work(0, {"STEP": 2, "MODE": 0}), timeline)
        assert result.status == "ok", result.error
        assert backend.device_detail == "local rank 0, no CUDA_VISIBLE_DEVICES"
    finally:
        backend.close()
    assert not alive(spawned.pid)


GPU_SPEC = '''
import numpy as np
n = 1 << 16
a = np.arange(n, dtype=np.float32)
lang = "cupy"
kernel_name = "twice"
kernel_source = """
extern "C" __global__ void twice(float *y, const float *x, int n)
{
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
problem_size = n
arguments = [np.zeros(n, np.float32), a, np.int32(n)]
answer = [2 * a, None, None]
tune_params = {"block_size_x": [64, 128]}
iterations = 3
'''


def test_a_gpu_worker_made_its_context_before_its_problem_and_measures_on_that_gpu(cp, tmp_path):
    (tmp_path / "spec.py").write_text(GPU_SPEC)
    problem, _ = load_spec(str(tmp_path / "spec.py"))
    spawned = spawn_worker("cuda", 0)  # a spec's alias: the worker resolves it
    clock = Clock()
    timeline = Timeline(clock)
    backend = IsolatedBackend(problem.kernel, str(tmp_path), clock, local_rank=0, spawned=spawned, timeline=timeline)
    try:
        assert backend.worker.pids == [spawned.pid]
        assert backend.device_detail.startswith("GPU 0, ")
        assert [r.phase for r in timeline.rows if r.phase == WORKER_START_PHASE] == [WORKER_START_PHASE]
        result = backend.run(Work(0, {"block_size_x": 128}), timeline)
        assert result.status == "ok", result.error
    finally:
        backend.close()
    assert not alive(spawned.pid)


def test_an_early_worker_is_claimed_only_for_its_backend_and_local_rank(monkeypatch):
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    for key in ("OMPI_COMM_WORLD_LOCAL_RANK",):
        monkeypatch.delenv(key, raising=False)
    before_mpi.start("c")  # a spec's spelling: the backend's recorded name is "C"
    pid = before_mpi._early.pid if before_mpi._early else 0
    assert pid and alive(pid)
    spawned = before_mpi.claim("C", True, 1)
    assert spawned is not None and spawned.pid == pid
    spawned.end()
    assert not alive(pid)

    # Another local rank (MPI's), another backend, no isolation, a lang no backend has.
    for started, lang, isolate, local_rank in [
        ("C", "C", True, 0),
        ("C", "cupy", True, 1),
        ("C", "C", False, 1),
        ("fortran", "C", True, 1),
    ]:
        before_mpi.start(started)
        pid = before_mpi._early.pid if before_mpi._early else 0
        assert before_mpi.claim(lang, isolate, local_rank) is None
        assert not alive(pid), (started, lang, isolate, local_rank)  # ended at once, not left to its orphan watch

    before_mpi.start("C")
    pid = before_mpi._early.pid if before_mpi._early else 0
    before_mpi.end()
    assert before_mpi._early is None and not alive(pid)
    before_mpi.start(None)  # the spec computes its lang, or no isolation was asked for
    assert before_mpi._early is None


def pool_alive(ahead: CompileAhead) -> bool:
    return any(alive(pid) for pid in ahead._pool.pids)


def test_early_compile_workers_are_taken_only_as_many_and_for_the_backend_they_warm_up(monkeypatch):
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    monkeypatch.setenv("PMI_RANK", "0")
    clock = Clock()
    before_mpi.start_compile_workers(1)  # without a worker started: none
    assert before_mpi._ahead is None
    before_mpi.start("C")
    before_mpi.start_compile_workers(1)
    assert before_mpi._ahead is not None
    ahead = before_mpi.compile_ahead("C", 1, clock)
    assert ahead is not None and ahead.clock is clock and ahead.workers == 1 and pool_alive(ahead)
    before_mpi.end()  # the measuring worker, which nothing claimed here
    assert pool_alive(ahead)  # taken: the loop's to close
    ahead.close()
    assert not pool_alive(ahead)

    for started, workers, lang, wanted in [("C", 1, "C", 2), ("C", 1, "C", 0), ("C", 1, "cupy", 1)]:
        before_mpi.start(started)
        before_mpi.start_compile_workers(workers)
        assert before_mpi._ahead is not None
        pool = before_mpi._ahead[1]
        assert before_mpi.compile_ahead(lang, wanted, clock) is None
        assert not pool_alive(pool), (started, workers, lang, wanted)
        before_mpi.end()

    before_mpi.start("C")  # kernels on the CPU: no compile workers unless asked for
    before_mpi.start_compile_workers()
    assert before_mpi._ahead is None
    before_mpi.end()
    before_mpi.start("cupy")  # on a GPU: the default, from the ranks the launcher says share the node
    before_mpi.start_compile_workers()
    assert before_mpi._ahead is not None and before_mpi._ahead[1].workers == default_workers(2, warn=False)
    pool = before_mpi._ahead[1]
    before_mpi.end()
    assert before_mpi._ahead is None and not pool_alive(pool)


# -- under mpiexec ----------------------------------------------------------------------------


def test_each_rank_measures_in_the_worker_it_started_before_mpi(tmp_path):
    spec = write_scale_spec(tmp_path)
    cache = tmp_path / "out.h5"
    proc, mark = job(2, [str(spec), "--out", str(cache), "-v"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    claimed = logged_pids(
        proc.stderr, r"worker process (?P<pid>\d+), started [\d.]+ s ago before MPI, takes the problem"
    )
    ready = logged_pids(proc.stderr, r"worker process (?P<pid>\d+) ready ")
    assert set(claimed) == {0, 1} and claimed == ready, proc.stderr
    starts = worker_starts(cache)
    spec_start_s, _ = spec_phase(cache)
    assert set(starts) == {0, 1}
    # Rank 0 spawns its worker before it begins to load the spec, so before any problem exists.
    # The launcher starts rank 1 later, on a busy machine even after rank 0 has loaded the spec:
    # its worker was still spawned before MPI, so before the problem reached it (the lines above).
    assert starts[0][0] < spec_start_s
    assert "starting a fresh one" not in proc.stderr
    assert marked(mark) == []


def test_compile_workers_started_before_mpi_compile_the_run(tmp_path):
    spec = write_scale_spec(tmp_path)
    cache = tmp_path / "out.h5"
    proc, mark = job(2, [str(spec), "--out", str(cache), "--compile-workers", "1", "-v"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    taken = [line for line in proc.stderr.splitlines() if "1 compile worker(s), started before MPI, take" in line]
    assert len(taken) == 2 and "ending 1 compile worker" not in proc.stderr, proc.stderr
    with h5py.File(cache, "r") as f:
        phases = [p.decode() for p in f["timeline"]["phase"]]
        statuses = {s.decode() for s in f["results"]["status"]}
    assert "compile_ahead" in phases and statuses == {"ok"}
    assert marked(mark) == []


def test_a_refused_spec_ends_the_early_workers_and_says_so_in_one_line(tmp_path):
    spec = write_scale_spec(tmp_path, restrictions='["STEP > 8"]')  # no configuration is left
    proc, mark = job(2, [str(spec), "--out", str(tmp_path / "out.h5"), "--compile-workers", "1"], tmp_path)
    left = marked(mark)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"mpitune: error: {spec}: restrictions: no configuration satisfies the restrictions"
    ]
    assert left == []
    assert not (tmp_path / "out.h5").exists()

    proc, mark = job(2, [str(spec), "--out", str(tmp_path / "out.h5"), "--compile-workers", "1", "-v"], tmp_path)
    left = marked(mark)
    assert proc.returncode == 2, proc.stderr
    ended = logged_pids(proc.stderr, r"ending worker process (?P<pid>\d+), started before MPI: no problem came for it")
    assert set(ended) == {0, 1}, proc.stderr
    assert proc.stderr.count("ending 1 compile worker(s), started before MPI: no problem came for them") == 2
    assert left == [] and not any(alive(pid) for pid in ended.values())


def test_a_launcher_local_rank_that_mpi_contradicts_restarts_the_worker_on_the_right_device(tmp_path):
    spec = write_scale_spec(tmp_path)
    cache = tmp_path / "out.h5"
    # Each rank is told the other's local rank: the launcher's variable that is read first lies.
    swap = "export OMPI_COMM_WORLD_LOCAL_RANK=$((1 - MPI_LOCALRANKID))"
    proc, mark = job(2, [str(spec), "--out", str(cache), "-v"], tmp_path, swap, CUDA_VISIBLE_DEVICES="0,1")
    assert proc.returncode == 0, proc.stderr
    restarted = logged_pids(
        proc.stderr,
        r"ending worker process (?P<pid>\d+), started [\d.]+ s ago before MPI: it warmed up backend C on local "
        r"rank \d and the problem needs C on local rank \d \(MPI's\): starting a fresh one",
    )
    ready = logged_pids(proc.stderr, r"worker process (?P<pid>\d+) ready ")
    assert set(restarted) == set(ready) == {0, 1}, proc.stderr
    assert all(restarted[r] != ready[r] for r in ready)
    with h5py.File(cache, "r") as f:
        ranks = f["ranks"][...]
        statuses = {s.decode() for s in f["results"]["status"]}
    detail = {int(r["rank"]): r["device_detail"].decode() for r in ranks}
    assert detail == {r: f"local rank {r}, GPU {r} of CUDA_VISIBLE_DEVICES=0,1" for r in (0, 1)}
    assert statuses == {"ok"}
    _, spec_end_s = spec_phase(cache)
    assert all(start_s > spec_end_s for start_s, _ in worker_starts(cache).values())  # the fresh workers
    assert marked(mark) == []


def test_without_isolation_no_worker_is_started_early(tmp_path):
    spec = write_scale_spec(tmp_path)
    cache = tmp_path / "out.h5"
    proc, mark = job(1, [str(spec), "--out", str(cache), "--no-isolation", "-v"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "worker process" not in proc.stderr and worker_starts(cache) == {}
    assert marked(mark) == []
