"""Real jobs over several device models (``--devices each``, scheduling/devices/models.py) under mpiexec.

The models are simulated: a replay of two measured files of one kernel, world rank r replaying
file r % 2, so that the ranks report two device models. The same scheduling runs a real job."""

from __future__ import annotations

import h5py
import pytest

from tests.conftest import mpitune, report_json

A100, A4000 = "NVIDIA A100-PCIE-40GB (replayed)", "NVIDIA RTX A4000 (replayed)"


@pytest.fixture
def conv(shared_caches):
    return [str(shared_caches / "convolution_A100.json.gz"), str(shared_caches / "convolution_A4000.json.gz")]


def devices_of(path) -> set[str]:
    with h5py.File(path, "r") as f:
        return {d.decode() for d in f["ranks"]["device"][...]}


def test_each_model_is_tuned_apart_into_its_own_file_and_learns_from_the_other(conv, tmp_path):
    proc = mpitune(
        4, ["replay", *conv, "--devices", "each", "--max-fevals", "40", "--output", "conv.h5", "-v"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = {A100: tmp_path / "conv.NVIDIA_A100-PCIE-40GB.h5", A4000: tmp_path / "conv.NVIDIA_RTX_A4000.h5"}
    assert f"each device model tuned apart: {A100}: rank(s) 0, 2; {A4000}: rank(s) 1, 3" in proc.stdout
    assert not (tmp_path / "conv.h5").exists()
    for model, path in files.items():
        assert devices_of(path) == {model}  # each file holds its model's ranks alone
        summary = report_json(path)
        assert summary["configs"] == 40 and summary["ranks"] == 2
        assert summary["confirmation"]  # each model confirmed its own winner
    assert "learned the other device models' results" in proc.stderr
    (last,) = [line for line in proc.stdout.splitlines() if "each device model's results:" in line]
    assert f"{files[A100].name} " in last and f"{files[A4000].name};" in last

    again = mpitune(4, ["replay", *conv, "--devices", "each", "--max-fevals", "20", "--output", "conv.h5"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("40 already in") == 2  # both files resumed
    assert all(report_json(path)["configs"] == 60 for path in files.values())


def test_without_devices_each_the_models_are_refused_as_before(conv, tmp_path):
    proc = mpitune(2, ["replay", *conv, "--max-fevals", "4", "--output", "conv.h5"], tmp_path)
    assert proc.returncode == 2
    assert "the ranks have different devices" in proc.stderr and "--allow-mixed-devices" in proc.stderr


def measured_ids(path) -> tuple[list[tuple[int, float]], set[int]]:
    """A file's (config id, time) of every result that passed, and the ids its last confirmation timed."""
    with h5py.File(path, "r") as f:
        results, confirmed = f["results"][...], f["confirmed"][...]
    passed = [(int(r["config_id"]), float(r["time_ms"])) for r in results if r["status"] == b"ok"]
    last = confirmed["run"].max()
    return passed, {int(c["config_id"]) for c in confirmed if c["run"] == last}


def test_portable_candidates_are_measured_and_confirmed_on_every_model(conv, tmp_path):
    """``--portable 3``: once both searches ended, each model measures what it lacks of the three
    best portable candidates and of the other model's best, and times them with its confirmation.
    The A100 has two ranks and the A4000 one, so one search ends first and its ranks hold."""
    args = ["replay", *conv, "--devices", "each", "--portable", "3", "--max-fevals", "30", "--output", "conv.h5"]
    proc = mpitune(3, [*args, "-v"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("portable candidates,") == 2
    a100, a4000 = (
        measured_ids(tmp_path / name) for name in ("conv.NVIDIA_A100-PCIE-40GB.h5", "conv.NVIDIA_RTX_A4000.h5")
    )
    for (mine, _), (theirs, _) in ((a100, a4000), (a4000, a100)):
        best_id = min(mine, key=lambda r: r[1])[0]
        assert best_id in {i for i, _ in theirs}  # each model's best was measured on the other
    common = a100[1] & a4000[1]
    assert len(common) >= 3, (a100[1], a4000[1])  # the portable candidates, confirmed on both


def test_portable_needs_devices_each(conv, tmp_path):
    proc = mpitune(2, ["replay", *conv, "--portable", "2", "--max-fevals", "4", "--output", "conv.h5"], tmp_path)
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("mpitune: error")]
    assert "portable" in line and 'devices = "each"' in line


def test_devices_each_on_one_model_is_todays_run(scale_spec, tmp_path):
    proc = mpitune(2, [str(scale_spec), "--devices", "each", "--cache", "out.h5"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "each device model" not in proc.stdout
    assert sorted(p.name for p in tmp_path.glob("*.h5")) == ["out.h5"]


def test_a_signal_stops_every_model_resumable_and_each_file_resumes_to_its_end(conv, tmp_path):
    """What Slurm does at the time limit: every task signalled. Each model drains, records
    ``signal`` and exits 75; the same job again finishes both spaces, each configuration once."""
    import os
    import signal
    import subprocess

    from tests.conftest import start_mpitune, wait_for_batch

    args = ["replay", *conv, "--devices", "each", "--strategy", "brute_force", "--output", "conv.h5"]
    job = start_mpitune(4, args, tmp_path)
    wait_for_batch(job, 3)
    ranks = subprocess.run(["pgrep", "-f", "mpitune replay"], capture_output=True, text=True).stdout.split()
    for pid in ranks:
        if int(pid) != job.pid:
            os.kill(int(pid), signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert out.count("stopped early (signal)") == 2, out[-3000:]  # each model says why it stopped
    assert job.returncode == 75, err[-3000:]
    files = [tmp_path / "conv.NVIDIA_A100-PCIE-40GB.h5", tmp_path / "conv.NVIDIA_RTX_A4000.h5"]
    for path in files:
        with h5py.File(path, "r") as f:
            assert f["runs"][0]["status"] == b"signal"
            ids = list(f["results"]["config_id"])
        assert 0 < len(ids) < 4362 and len(set(ids)) == len(ids)
    resumed = mpitune(4, args, tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for path in files:
        with h5py.File(path, "r") as f:
            assert sorted(f["results"]["config_id"]) == list(range(4362))


def test_a_dead_rank_of_one_model_ends_the_job_and_both_files_resume(conv, tmp_path):
    """A rank of the second model killed mid-run: the whole job ends within seconds, each file
    reads back sound, and the same job again finishes both spaces."""
    import os
    import signal
    import time

    from tests.conftest import check_file, start_mpitune, wait_for_batch

    args = ["replay", *conv, "--devices", "each", "--strategy", "brute_force", "--output", "conv.h5"]
    files = [tmp_path / "conv.NVIDIA_A100-PCIE-40GB.h5", tmp_path / "conv.NVIDIA_RTX_A4000.h5"]
    job = start_mpitune(4, args, tmp_path)
    wait_for_batch(job, 3)
    with h5py.File(files[1], "r", libver="latest", swmr=True) as f:
        pid = int(f["ranks"]["pid"][1])  # the model's rank 1: world rank 3
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    job.communicate(timeout=90)
    assert time.monotonic() - killed < 30 and job.returncode != 0
    for path in files:
        assert "sound" in check_file(path)
    resumed = mpitune(4, args, tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for path in files:
        with h5py.File(path, "r") as f:
            assert sorted(f["results"]["config_id"]) == list(range(4362))


def test_a_model_whose_file_is_refused_ends_its_ranks_in_one_line_and_the_others_finish(conv, tmp_path):
    """The second model's file holds another problem's results: its ranks end with the refusal
    (exit 2), named in one line, while the first model tunes to its end; nothing hangs."""
    from tests.scheduling.test_manager import write_measured

    taken = tmp_path / "conv.NVIDIA_RTX_A4000.h5"
    another = write_measured(tmp_path / "another.json")  # kernel "k": another problem
    other = mpitune(1, ["replay", str(another), "--max-fevals", "3", "--output", str(taken)], tmp_path)
    assert other.returncode == 0, other.stderr[-2000:]
    proc = mpitune(4, ["replay", *conv, "--devices", "each", "--max-fevals", "12", "--output", "conv.h5"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    refusals = [line for line in proc.stderr.splitlines() if line.startswith("mpitune: error:")]
    assert len(refusals) == 1 and str(taken) in refusals[0], proc.stderr[-3000:]
    assert report_json(tmp_path / "conv.NVIDIA_A100-PCIE-40GB.h5")["configs"] == 12
    assert report_json(taken)["kernel"] == "k"  # untouched
