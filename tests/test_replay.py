"""Replays under a real mpiexec: budgets, simulated time, every strategy on the real caches."""

import h5py
import pytest
from conftest import kt_cache, mpitune, report_json, write_scale_spec

from mpitune import strategies


def test_replay_verb_records_every_measured_configuration(tmp_path):
    source = kt_cache(str(tmp_path / "c.json"), dangling=True)
    out = tmp_path / "out.h5"
    proc = mpitune(2, ["replay", source, "--output", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "simulated s" in proc.stdout
    s = report_json(out)
    assert s["configs"] == 6 and s["ok"] == 2 and s["best"]["config"] == {"x": 1, "y": 2}
    assert s["failed"] == {"compile_error": 1, "invalid": 1, "runtime_error": 2}
    with h5py.File(out, "r") as f:
        assert '"lang": "replay"' in f.attrs["problem"]
        assert f["ranks"][0]["device"].decode() == "Test GPU (replayed)"


def test_simulated_wall_time_shrinks_with_ranks(tmp_path):
    source = kt_cache(str(tmp_path / "c.json"))
    walls = {}
    for ranks in (1, 3):
        out = tmp_path / f"r{ranks}.h5"
        assert mpitune(ranks, ["replay", source, "--output", str(out)], tmp_path).returncode == 0
        walls[ranks] = report_json(out)["wall_s"]
    # One rank does all the recorded work, one after the other.
    assert walls[1] == pytest.approx(0.1 + 0.005 + 0.02 + 0.2 + 0.005 + 0.01 + 0.05 + 0.08 + 0.001 + 0.01, rel=1e-6)
    # Three ranks, two batches of one configuration each, both handed out at once: a worker
    # runs its two back to back, rank 0 its second once the first batch is recorded. Rank 1
    # has (1, 2) then (3, 2), rank 2 (2, 1) then (2, 2), rank 0 (1, 1), then the invalid (3, 1).
    assert walls[3] == pytest.approx(max(0.215 + 0.01, 0.05 + 0.081, max(0.125, 0.215) + 0.0), rel=1e-6)


def test_simulation_mode_in_a_spec_and_simulated_time_limit(tmp_path):
    kt_cache(str(tmp_path / "measured.json"))
    spec = tmp_path / "sim.py"
    spec.write_text('simulation_mode = True\ncache = "measured.json"\nrestrictions = ["x < 3"]\n')
    proc = mpitune(
        1, [str(spec), "--cache", str(tmp_path / "o.h5"), "--time-limit", "0.3", "--strategy", "brute_force"], tmp_path
    )
    assert proc.returncode == 75, proc.stderr
    with h5py.File(tmp_path / "o.h5", "r") as f:
        run = f["runs"][0]
        xs = list(f["results"]["x"])
    assert run["status"].decode() == "time_limit"
    # (1,1) ends at 0.125 simulated s, (1,2) at 0.34: a third batch, expected to take as long
    # as the median batch, would not end before 0.3 s. x == 3 is restricted away anyway.
    assert xs == [1, 1] and run["wall_s"] == pytest.approx(0.34)


def test_replay_of_an_mpitune_file(tmp_path):
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4], "MODE": [0, 2]}')
    first = tmp_path / "real.h5"
    assert mpitune(2, [str(spec), "--cache", str(first)], tmp_path).returncode == 0
    out = tmp_path / "replayed.h5"
    proc = mpitune(2, ["replay", str(first), "--output", str(out), "--strategy", "random_sample"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    real, replayed = report_json(first), report_json(out)
    assert replayed["configs"] == real["configs"] == 6
    assert replayed["best"]["config"] == real["best"]["config"]
    assert replayed["failed"] == real["failed"] == {"verify_failed": 3}


@pytest.mark.parametrize("strategy", strategies.available())
def test_every_strategy_on_every_real_cache_respects_the_budget(tmp_path, strategy, shared_caches):
    caches = sorted(shared_caches.glob("*.json.gz"))
    assert caches, f"no Kernel Tuner cache in {shared_caches}"
    for cache in caches:
        out = tmp_path / f"{cache.name}.h5"
        proc = mpitune(
            4,
            [
                "replay",
                str(cache),
                "--strategy",
                strategy,
                "--max-fevals",
                "200",
                "--seed",
                "3",
                "--output",
                str(out),
            ],
            tmp_path,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        with h5py.File(out, "r") as f:
            ids = list(f["results"]["config_id"])
        assert len(ids) == 200 and len(set(ids)) == 200, cache.name
