"""End to end: real mpiexec, real gcc, real HDF5 files."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import mpitune, report_json, start_mpitune, wait_for_batch, write_scale_spec

from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import BACKGROUND_PHASES
from mpitune.spec.load import load_spec


def space_size(spec) -> int:
    problem, _ = load_spec(str(spec))
    return len(SearchSpace.build(problem.kernel.tune_params, problem.restrictions))


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_brute_force_records_every_configuration_once(tmp_path, ranks):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16], "MODE": [0]}')
    cache = tmp_path / "out.h5"
    proc = mpitune(ranks, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best:" in proc.stdout
    with h5py.File(cache, "r") as f:
        ids = f["results"]["config_id"]
        ranks_used = set(f["results"]["rank"])
    assert sorted(ids) == list(range(5))
    assert ranks_used == set(range(min(ranks, 5)))
    summary = report_json(cache)
    assert summary["configs"] == space_size(spec) == 5
    assert summary["ranks"] == ranks and summary["runs"] == 1


def test_failures_are_statuses_and_the_run_goes_on(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 4], "MODE": [0, 1, 2]}')
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = report_json(cache)
    assert summary["configs"] == 6
    assert summary["ok"] == 2
    assert summary["failed"] == {"compile_error": 2, "verify_failed": 2}
    assert summary["best"]["config"]["MODE"] == 0
    with h5py.File(cache, "r") as f:
        rows = f["results"][...]
    errors = {r["status"].decode(): r["error"].decode() for r in rows}
    assert "does not compile" in errors["compile_error"]
    assert "differ by more than atol" in errors["verify_failed"]


def test_more_ranks_than_configurations(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2], "MODE": [0]}')
    cache = tmp_path / "out.h5"
    proc = mpitune(4, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report_json(cache)["configs"] == 2


def test_rerun_resumes_and_measures_nothing_again(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0]}')
    cache = tmp_path / "out.h5"
    first = mpitune(2, [str(spec), "--cache", str(cache), "--max-fevals", "4"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert report_json(cache)["configs"] == 4
    second = mpitune(3, [str(spec), "--cache", str(cache)], tmp_path)
    assert second.returncode == 0, second.stderr
    third = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert third.returncode == 0, third.stderr
    assert "0 configurations measured" in third.stdout
    with h5py.File(cache, "r") as f:
        ids = list(f["results"]["config_id"])
        runs = f["runs"][...]
    assert sorted(ids) == list(range(6))  # each exactly once
    assert list(runs["measured"]) == [4, 2, 0]
    assert [s.decode() for s in runs["status"]] == ["max_fevals", "finished", "finished"]
    summary = report_json(cache)
    assert summary["runs"] == 3 and summary["ranks"] == 3


def test_a_different_problem_in_the_same_cache_is_refused(tmp_path):
    spec = write_scale_spec(tmp_path)
    cache = tmp_path / "out.h5"
    assert mpitune(1, [str(spec), "--cache", str(cache)], tmp_path).returncode == 0
    spec.write_text(spec.read_text().replace("iterations = 3", "iterations = 4"))
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 2
    assert "different problem" in proc.stderr and "iterations" in proc.stderr
    assert report_json(cache)["configs"] == 4  # untouched


def test_random_sample_respects_max_fevals_and_seed(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 3, 4, 5, 6, 7, 8], "MODE": [0]}')
    picked = []
    for name in ("a.h5", "b.h5"):
        proc = mpitune(
            2,
            [
                str(spec),
                "--cache",
                str(tmp_path / name),
                "--strategy",
                "random_sample",
                "--max-fevals",
                "5",
                "--seed",
                "7",
            ],
            tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        with h5py.File(tmp_path / name, "r") as f:
            picked.append(list(f["results"]["config_id"]))
    assert len(picked[0]) == 5 and len(set(picked[0])) == 5
    assert sorted(picked[0]) == sorted(picked[1])


def test_time_limit_stops_early_with_the_resumable_exit_code(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 201)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    limit_s = 3.0  # start-up (workers, compilers) included
    proc = mpitune(2, [str(spec), "--cache", str(cache), "--time-limit", str(limit_s)], tmp_path)
    assert proc.returncode == 75, proc.stderr
    assert "run the same command again to resume" in proc.stdout
    with h5py.File(cache, "r") as f:
        run = f["runs"][0]
    assert run["status"].decode() == "time_limit"
    assert 0 < run["measured"] < 200
    assert run["wall_s"] < limit_s + 0.3  # the last batch was not expected to fit, so none started late
    resumed = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    with h5py.File(cache, "r") as f:
        assert sorted(f["results"]["config_id"]) == list(range(200))


@pytest.mark.parametrize("signame", ["SIGUSR1", "SIGTERM"])
def test_signal_drains_the_batch_in_flight_and_exits_resumable(tmp_path, signame):
    import signal
    import subprocess

    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 121)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    proc = start_mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    wait_for_batch(proc, 3)
    # What Slurm does: signal every task of the step.
    ranks = subprocess.run(["pgrep", "-f", f"mpitune {spec}"], capture_output=True, text=True).stdout.split()
    for pid in ranks:
        if int(pid) != proc.pid:
            os.kill(int(pid), getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert f"received {signame}" in err and "(signal)" in out
    with h5py.File(cache, "r") as f:
        ids = list(f["results"]["config_id"])
        assert f["runs"][0]["status"] == b"signal"
    assert 0 < len(ids) < 120 and len(set(ids)) == len(ids)
    resumed = mpitune(3, [str(spec), "--cache", str(cache)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    with h5py.File(cache, "r") as f:
        assert sorted(f["results"]["config_id"]) == list(range(120))


@pytest.mark.parametrize("schedule", ["batches", "refill"])
def test_resumed_random_search_continues_its_saved_state(tmp_path, schedule):
    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 31)), "MODE": [0]}')
    split, whole = tmp_path / "split.h5", tmp_path / "whole.h5"
    args = ["--strategy", "genetic_algorithm", "--seed", "11", "--batch-size", "4", "--schedule", schedule]
    logs = []
    for cache, fevals in ((split, 8), (split, 8), (whole, 16)):
        proc = mpitune(2, [str(spec), "--cache", str(cache), *args, "--max-fevals", str(fevals), "-v"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        logs.append(proc.stderr)
    assert "resuming the saved state of strategy genetic_algorithm" in logs[1]
    assert "resuming" not in logs[0] + logs[2]
    with h5py.File(split, "r") as a, h5py.File(whole, "r") as b:
        assert "strategy_state" not in a and len(a["asked"]) == 16
        ids, runs = a["results"]["config_id"], a["results"]["run"]
        if schedule == "batches":
            # The same configurations: the second run went on with the population the first left.
            assert sorted(ids) == sorted(b["results"]["config_id"])
        else:
            # What the strategy knew at each ask depended on timing, so the uninterrupted run
            # need not ask the same; the second run went on from the first's state (its log says
            # so), each configuration measured once.
            assert len(set(ids.tolist())) == 16 and sorted(set(runs.tolist())) == [0, 1]


def figures_add_up(cache: Path, ranks: int) -> dict:
    """``report``'s figures of a run: each rank's busy and idle time make its wall time, no
    rank's phases overlap, and the ranks worked side by side. The report, for more checks."""
    s = report_json(cache)
    assert len(s["per_rank"]) == ranks
    for r in s["per_rank"]:
        assert r["busy_s"] + r["idle_s"] == pytest.approx(r["wall_s"], rel=0.03)
        assert r["compile_s"] > 0 and r["wall_s"] <= s["wall_s"] * 1.01
    # Ranks run side by side: the run's wall time is not the sum of their work.
    work = sum(r["busy_s"] for r in s["per_rank"])
    assert s["wall_s"] < work
    assert 0 < s["efficiency"] <= 1
    with h5py.File(cache, "r") as f:
        timeline = f["timeline"][...]
    own = timeline[~np.isin(timeline["phase"], [p.encode() for p in BACKGROUND_PHASES])]  # beside them: may overlap
    for rank in range(ranks):
        mine = np.sort(own[own["rank"] == rank], order="start_s")
        gaps = mine["start_s"][1:] - mine["end_s"][:-1]
        assert gaps.min() > -1e-6  # phases of one rank never overlap
    return s


def test_report_figures_add_up_to_measured_wall_time(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0, 2]}')
    cache = tmp_path / "out.h5"
    proc = mpitune(3, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    figures_add_up(cache, 3)


def test_a_refilled_run_records_each_configuration_once_and_what_each_ask_knew(tmp_path):
    """``--schedule refill``: one configuration per rank per ask (``--batch-size 3``), so
    that there are many asks; the failing configurations are statuses like any other."""
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0, 1, 2]}')
    cache = tmp_path / "out.h5"
    proc = mpitune(3, [str(spec), "--cache", str(cache), "--schedule", "refill", "--batch-size", "3"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best: " in proc.stdout and "18 configurations measured" in proc.stdout
    with h5py.File(cache, "r") as f:
        ids = list(f["results"]["config_id"])
        ranks_used = set(f["results"]["rank"])
        asked = np.unique(f["asked"]["batch"])
        told = f["told"][...]
        assert len(f["in_flight"]) == 0
        timeline = f["timeline"][...]
    assert sorted(ids) == list(range(18)) and ranks_used == {0, 1, 2}
    # Rank 0 measured beside its hand-outs: it wrote or asked while its lane measured (the
    # lane measures most of the run, and the workers' twelve reports come meanwhile).
    phases = set(np.char.strip(timeline["phase"][timeline["rank"] == 0].astype(str)))
    assert phases & {"write_beside", "strategy_beside"}, phases
    # One told count per ask, never falling, from nothing known at the first ask.
    assert len(asked) > 3 and told["batch"].tolist() == asked.tolist()
    assert told["rows"][0] == 0 and np.all(np.diff(told["rows"]) >= 0) and told["rows"][-1] < 18
    s = figures_add_up(cache, 3)
    assert s["configs"] == 18 and s["ok"] == 6
    assert s["failed"] == {"compile_error": 6, "verify_failed": 6}
    assert s["best"]["config"]["MODE"] == 0


def test_a_refilled_search_resumes_after_its_budget_and_afresh_after_a_stop_that_cut_chunks(tmp_path):
    """A budget ends the search cleanly: the next run replays it (resume.py). The stop file cuts
    the chunks the ranks hold (three configurations each: ``--batch-size 9`` on 3 ranks) after
    their next configuration (unless it comes between chunks), and ids handed out but not
    measured leave the search not continuable: the run after starts the strategy afresh from the
    file, knowing everything measured (docs/reliability.md, "Stopping early on purpose"), and
    measures what was cut."""
    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 41)), "MODE": [0]}')
    cache, stop = tmp_path / "out.h5", tmp_path / "stop"
    args = [str(spec), "--cache", str(cache), "--schedule", "refill", "--strategy", "genetic_algorithm"]
    args += ["--seed", "3", "--stop-file", str(stop), "-v"]
    budget = mpitune(3, [*args, "--batch-size", "3", "--max-fevals", "8"], tmp_path)
    assert budget.returncode == 0, budget.stderr
    args += ["--batch-size", "9"]
    stopped = start_mpitune(3, args, tmp_path)
    wait_for_batch(stopped, 3)
    stop.touch()
    out, err = stopped.communicate(timeout=60)
    assert stopped.returncode == 75, err
    assert "(signal)" in out and "run the same command again to resume" in out
    assert "resuming the saved state of strategy genetic_algorithm" in err and "does not replay" not in err
    with h5py.File(cache, "r") as f:
        asked, rows = f["asked"][...], f["results"][...]
        continuable = list(f["searches"]["continuable"])
    # Where the stop came as the ranks were between chunks (a loaded machine), nothing was cut:
    # the search is then continued, as after a budget.
    cut = set(asked["config_id"][asked["run"] == 1]) - set(rows["config_id"][rows["run"] == 1])
    assert continuable == [1, 0 if cut else 1]
    stop.unlink()
    last = mpitune(3, args, tmp_path)
    assert last.returncode == 0, last.stderr
    assert ("resuming the saved state" in last.stderr) is not bool(cut) and "does not replay" not in last.stderr
    with h5py.File(cache, "r") as f:
        ids = list(f["results"]["config_id"])
        runs = f["runs"][...]
        assert sorted(set(f["told"]["run"])) == [0, 1, 2]
    assert sorted(ids) == list(range(40))  # each exactly once, what was cut too
    assert [s.decode() for s in runs["status"]] == ["max_fevals", "signal", "finished"]
    assert runs["measured"][0] == 8 and 0 < runs["measured"][1] < 32


def test_kill_9_mid_run_loses_at_most_the_batch_in_flight(tmp_path):
    import signal
    import subprocess
    import sys

    from conftest import mpi_env

    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 101)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    proc = start_mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    done = wait_for_batch(proc, 5)
    os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank, mid-batch
    proc.communicate(timeout=30)
    with h5py.File(cache, "r", libver="latest", swmr=True) as f:
        kept = list(f["results"]["config_id"])
    assert len(kept) >= done and len(set(kept)) == len(kept)  # a progress line follows its write
    check = subprocess.run(
        [sys.executable, "-m", "mpitune", "check", str(cache)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "run 0 was killed" in check.stdout and "sound" in check.stdout
    resumed = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    with h5py.File(cache, "r") as f:
        assert sorted(f["results"]["config_id"]) == list(range(100))
        assert [s.decode() for s in f["runs"]["status"]] == ["killed", "finished"]


def test_ranks_on_different_device_models_are_refused_unless_allowed(tmp_path):
    from mpitune.model.timeline import Clock
    from mpitune.scheduling.messages import Placement
    from mpitune.scheduling.prepare import prepare
    from mpitune.scheduling.run_record import open_run
    from mpitune.spec.load import load_spec
    from mpitune.spec.settings import Overrides

    spec = write_scale_spec(tmp_path)
    where = [
        Placement("node1", "GPU model A", "", 1, 0),
        Placement("node1", "GPU model B", "", 2, 0),
        Placement("node2", "GPU model A", "", 3, 0),
    ]
    setup = prepare(*load_spec(str(spec), Overrides(cache_path=str(tmp_path / "out.h5"))))
    manager, error = open_run(setup, where, Clock(), 0.0, "test")
    assert manager is None
    assert "GPU model A: ranks 0, 2; GPU model B: ranks 1" in error and "--allow-mixed-devices" in error
    setup = prepare(*load_spec(str(spec), Overrides(cache_path=str(tmp_path / "out.h5"), allow_mixed_devices=True)))
    manager, error = open_run(setup, where, Clock(), 0.0, "test")
    assert error is None and manager.devices == ("GPU model A", "GPU model B", "GPU model A")
    manager.cache.close()


def test_a_dead_rank_ends_the_job_within_seconds_and_its_configurations_are_named(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import mpi_env

    spec = write_scale_spec(tmp_path, '{"STEP": list(range(1, 301)), "MODE": [0]}')
    cache = tmp_path / "out.h5"
    job = start_mpitune(3, [str(spec), "--cache", str(cache)], tmp_path)
    wait_for_batch(job, 3)
    with h5py.File(cache, "r", libver="latest", swmr=True) as f:
        pid = int(f["ranks"]["pid"][1])  # rank 1's process, as the file records it
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    job.communicate(timeout=60)
    assert time.monotonic() - killed < 10  # the job ended, no rank hangs in a collective
    assert job.returncode != 0
    check = subprocess.run(
        [sys.executable, "-m", "mpitune", "check", str(cache)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout
    assert "was in flight" in check.stdout and "rank 1 held" in check.stdout
    resumed = mpitune(3, [str(spec), "--cache", str(cache)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "the previous run was killed while batch" in resumed.stdout and "rank 1 held" in resumed.stdout
    with h5py.File(cache, "r") as f:
        assert sorted(f["results"]["config_id"]) == list(range(300))
