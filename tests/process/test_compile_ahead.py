"""Compiling ahead, for real: gcc in a pool of spawned processes, and whole MPI runs with it."""

from __future__ import annotations

import collections
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
from conftest import REPO, mpitune, report_json, write_scale_spec
from supervised_children import alive, children_of

from mpitune.backends.c import GccCompiler
from mpitune.model.result import Status
from mpitune.model.timeline import Clock
from mpitune.model.work import Work
from mpitune.process import compile_ahead
from mpitune.process.compile_ahead import CompileAhead, default_workers

SOURCE = "void scale(float *y) { y[0] = STEP; }\n#if STEP == 3\n#error three\n#endif\n"


def test_workers_follow_the_cores_a_rank_was_given():
    assert default_workers(1, {"SLURM_CPUS_PER_TASK": "16"}) == 15
    assert default_workers(8, {"SLURM_CPUS_PER_TASK": "1"}) == 1  # never none
    assert default_workers(1, {}) == max(1, len(os.sched_getaffinity(0)) - 1)  # its affinity, less one


def test_pool_compiles_in_parallel_and_hands_out_in_any_order(tmp_path):
    source = tmp_path / "k.c"
    source.write_text(SOURCE)
    # Each compile takes at least 0.3 s, so that both workers are busy at once once started.
    slow_gcc = ("sh", "-c", 'sleep 0.3 && exec gcc "$@"', "sh", "-O1", "-fPIC", "-shared")
    compiler = GccCompiler(slow_gcc, str(source), str(tmp_path))
    ahead = CompileAhead(2, Clock(), compiler)
    try:
        ahead.submit([Work(i, {"STEP": i}) for i in (1, 2, 3, 4, 6, 7, 8)])
        done = {i: ahead.take(Work(i, {"STEP": i}), 60) for i in (4, 1, 3, 2, 6, 7, 8)}
        # Taking one that was never queued queues it.
        done[5] = ahead.take(Work(5, {"STEP": 5}), 60)
    finally:
        ahead.close()
    assert done[3].status == Status.COMPILE_ERROR and "three" in done[3].error
    for i in (1, 2, 4, 5, 6, 7, 8):
        assert done[i].status is None and (tmp_path / f"config{i}.so").exists()
        assert done[i].compile_s > 0.3
    rows = [ahead.row(done[i], 0) for i in (1, 2, 4, 6, 7, 8)]
    assert all(r.phase == "compile_ahead" and r.end_s > r.start_s for r in rows)
    # Two workers: some compiles ran at the same time.
    spans = sorted((r.start_s, r.end_s) for r in rows)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans))


def test_a_compile_past_its_deadline_is_a_timeout_and_the_pool_recovers(tmp_path):
    source = tmp_path / "k.c"
    source.write_text(SOURCE)
    hanging = GccCompiler(("sh", "-c", "sleep 30", "sh"), str(source), str(tmp_path))
    ahead = CompileAhead(1, Clock(), hanging)
    try:
        ahead.submit([Work(1, {"STEP": 1}), Work(2, {"STEP": 2})])
        start = time.perf_counter()
        late = ahead.take(Work(1, {"STEP": 1}), 1.0)
        assert late.status == Status.TIMEOUT and "1.0 s" in late.error
        assert time.perf_counter() - start < 10
        # The restarted pool took the rest of the queue with it.
        assert ahead.take(Work(2, {"STEP": 2}), 1.0).status == Status.TIMEOUT
    finally:
        ahead.close()


def test_runs_with_compile_workers_record_what_compiled_in_the_background(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32, 64, 128], "MODE": [0, 1, 2]}')
    ahead, plain = tmp_path / "ahead.h5", tmp_path / "plain.h5"
    for cache, workers in ((ahead, "2"), (plain, "0")):
        # The search's compiles alone: the reference of a calibration and the candidates of the
        # confirmation are compiled by the same workers (tests/scheduling/test_calibrating.py).
        args = ["--compile-workers", workers, "--batch-size", "8", "--confirm", "0", "--no-calibrate"]
        proc = mpitune(2, [str(spec), "--cache", str(cache), *args], tmp_path)
        assert proc.returncode == 0, proc.stderr
    with h5py.File(ahead, "r") as a, h5py.File(plain, "r") as b:
        got = dict(zip(a["results"]["config_id"], a["results"]["status"]))
        assert got == dict(zip(b["results"]["config_id"], b["results"]["status"]))
        assert len(got) == 24
        passed = set(a["results"]["config_id"][a["results"]["status"] == b"ok"])
        timeline = a["timeline"][...]
        assert not (b["timeline"]["phase"] == b"compile_ahead").any()
    background = timeline[timeline["phase"] == b"compile_ahead"]
    # Every configuration compiled in the background; a second time only one that passed, for the
    # first-launch race's second pass (scheduling/rank.py, Chunk.two_passes).
    compiles = collections.Counter(background["config_id"].tolist())
    assert set(compiles) == set(got)
    assert all(n == 1 or (n == 2 and c in passed) for c, n in compiles.items()), compiles
    # Brute force knows its order, so a rank compiled the next hand-out it held before it began
    # there.
    early = 0
    for rank in (0, 1):
        mine = timeline[timeline["rank"] == rank]
        for batch in sorted(set(mine["batch"][mine["batch"] >= 0].tolist()))[1:]:
            own = mine[(mine["batch"] == batch) & (mine["phase"] != b"compile_ahead")]
            if not len(own):
                continue
            ahead_rows = mine[(mine["batch"] == batch) & (mine["phase"] == b"compile_ahead")]
            early += int((ahead_rows["start_s"] < own["start_s"].min()).sum())
    assert early > 0
    s = report_json(ahead)
    for r in s["per_rank"]:
        assert r["compile_ahead_s"] > 0
        assert (
            r["busy_s"] + r["idle_s"] == np.float64(r["wall_s"])
            or abs(r["busy_s"] + r["idle_s"] - r["wall_s"]) < 0.03 * r["wall_s"]
        )


def test_compile_workers_end_when_their_rank_is_killed(tmp_path):
    rank = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time\nfrom mpitune.process.compile_ahead import CompileAhead\n"
                "from mpitune.model.timeline import Clock\n"
                "ahead = CompileAhead(2, Clock())\nprint('up', flush=True)\ntime.sleep(120)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert rank.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 30
        while len(workers := children_of(rank.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) >= 2
    finally:
        rank.send_signal(signal.SIGKILL)
        rank.wait()
    deadline = time.monotonic() + 20
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers)


def nice(pid: int) -> int:
    """The nice value of a process's main thread, as the kernel has it."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_compile_workers_run_below_their_rank_s_priority(tmp_path):
    """Background work: where cores are short, the rank and its measuring worker come first."""
    source = tmp_path / "k.c"
    source.write_text(SOURCE)
    gcc = ("gcc", "-O1", "-fPIC", "-shared")
    ahead = CompileAhead(2, Clock(), GccCompiler(gcc, str(source), str(tmp_path)))
    try:
        compiled = ahead.take(Work(0, {"STEP": 1}), deadline_s=60)
        assert compiled.finished, compiled.error
        wanted = min(19, os.nice(0) + compile_ahead.NICE)  # from their birth, so at once
        assert [nice(pid) for pid in ahead._pool.pids] == [wanted, wanted]
        assert nice(os.getpid()) == os.nice(0)  # the rank keeps its own
    finally:
        ahead.close()
