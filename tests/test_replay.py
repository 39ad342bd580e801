"""Replays under a real mpiexec: budgets, simulated time, every strategy on the real caches."""

from dataclasses import replace
from functools import partial

import h5py
import numpy as np
import pytest
from conftest import kt_cache, mpitune, report_json, write_scale_spec

from mpitune import strategies
from mpitune.backends import replay
from mpitune.errors import SpecError
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


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


def test_a_replay_starts_from_a_prior_of_an_mpitune_file(tmp_path):
    source = kt_cache(str(tmp_path / "c.json"))
    first = mpitune(1, ["replay", source, "--out", "first.h5"], tmp_path)
    assert first.returncode == 0, first.stderr
    again = mpitune(1, ["replay", source, "--prior", "first.h5", "--out", "again.h5"], tmp_path)
    assert again.returncode == 0, again.stderr
    [prior] = report_json(tmp_path / "again.h5")["prior"]
    # Kernel Tuner's cache measured 6 configurations, 2 of them ok: the replay's file holds the same.
    assert (prior["path"], prior["kernel_name"], prior["device"]) == (
        str(tmp_path / "first.h5"),
        "k",
        "Test GPU (replayed)",
    )
    assert (prior["problem_size"], prior["shared"], prior["matched"]) == ([64, 64], ["x", "y"], 2)


@pytest.mark.parametrize("schedule", ["batches", "refill"])
def test_simulated_wall_time_shrinks_with_ranks(tmp_path, schedule):
    source = kt_cache(str(tmp_path / "c.json"))
    walls = {}
    for ranks in (1, 3):
        out = tmp_path / f"r{ranks}.h5"
        # The search's time alone: neither calibration nor confirmation (tested where they are built).
        args = ["replay", source, "--output", str(out), "--confirm", "0", "--no-calibrate", "--schedule", schedule]
        assert mpitune(ranks, args, tmp_path).returncode == 0
        walls[ranks] = report_json(out)["wall_s"]
    # One rank does all the recorded work, one after the other.
    assert walls[1] == pytest.approx(0.1 + 0.005 + 0.02 + 0.2 + 0.005 + 0.01 + 0.05 + 0.08 + 0.001 + 0.01, rel=1e-6)
    if schedule == "batches":
        # Three ranks, two batches of one configuration each, both handed out at once: a worker
        # runs its two back to back, rank 0 its second once it holds fewer than two. Rank 1
        # has (1, 2) then (3, 2), rank 2 (2, 1) then (2, 2), rank 0 (1, 1), then the invalid (3, 1).
        assert walls[3] == pytest.approx(max(0.215 + 0.01, 0.05 + 0.081, max(0.125, 0.215) + 0.0), rel=1e-6)
    else:
        # One configuration a rank first; then, fewer left than two a rank, a rank gets one more
        # only once it holds none: rank 2 takes (2, 2) after (2, 1), rank 0 the invalid (3, 1) and
        # (3, 2) after (1, 1), all within rank 1's (1, 2), the longest: it alone is the wall.
        assert walls[3] == pytest.approx(0.215, rel=1e-6)


def test_simulation_mode_in_a_spec_and_simulated_time_limit(tmp_path):
    kt_cache(str(tmp_path / "measured.json"))
    spec = tmp_path / "sim.py"
    spec.write_text('simulation_mode = True\ncache = "measured.json"\nrestrictions = ["x < 3"]\n')
    # One configuration per batch (one rank's default batch is whole, and nothing would be
    # known to stop it before it went out).
    args = [str(spec), "--cache", str(tmp_path / "o.h5"), "--time-limit", "0.3", "--strategy", "brute_force"]
    proc = mpitune(1, [*args, "--batch-size", "1"], tmp_path)
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
    # Every recorded launch replayed (no racing): the first-launch rule stands a configuration's
    # first recorded launch in for its verified one, and a C kernel of microseconds timed on a busy
    # CPU is noisier than that rule assumes, so in another order it could stop the best.
    replay = tmp_path / "replay.py"
    replay.write_text('simulation_mode = True\ncache = "real.h5"\nracing = False\nstrategy = "random_sample"\n')
    proc = mpitune(2, [str(replay), "--cache", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    real, replayed = report_json(first), report_json(out)
    assert replayed["configs"] == real["configs"] == 6
    # The same best, unless the real run could not tell the two apart: on a busy machine the
    # C kernel's STEP 1 and 2 can time within noise, and the replay's calibration of its two
    # ranks may then order them the other way. Its confirmation names what it could not tell apart;
    # there is none where the best stood alone within noise (nothing to choose between).
    confirmed = real["confirmation"] or {"winner": real["best"]["config"], "tied": []}
    alike = [real["best"]["config"], confirmed["winner"], *confirmed["tied"]]
    assert replayed["best"]["config"] in alike, (replayed["best"], real["best"], confirmed)
    assert replayed["failed"] == real["failed"] == {"verify_failed": 3}
    # The replay verb reads the same file (racing as by default).
    verb = tmp_path / "verb.h5"
    proc = mpitune(2, ["replay", str(first), "--output", str(verb), "--strategy", "random_sample"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report_json(verb)["configs"] == 6 and report_json(verb)["failed"] == {"verify_failed": 3}


@pytest.mark.parametrize("strategy", strategies.available())
def test_every_strategy_respects_the_budget_on_real_caches(tmp_path, strategy, shared_caches):
    """Each strategy on two of the real caches, taken in turn, so that every cache meets several
    strategies: every pair would be fifty jobs, a sixth of the suite's time on 2 cores."""
    caches = sorted(shared_caches.glob("*.json.gz"))
    assert len(caches) >= 2, f"fewer than two Kernel Tuner caches in {shared_caches}"
    turn = strategies.available().index(strategy)
    for cache in (caches[turn % len(caches)], caches[(turn + 1) % len(caches)]):
        out = tmp_path / f"{cache.name}.h5"
        # Two ranks keep two batches in flight, as any number does; four cost a third more on 2 cores.
        proc = mpitune(
            2,
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


def _ratios(out, source) -> dict[int, list[float]]:
    """By rank, the times each ok configuration got there divided by the ones recorded."""
    data = measured.load(str(source))
    lookup, names = data.lookup(), list(data.tune_params)
    with h5py.File(out, "r") as f:
        results, timeline = f["results"][:], f["timeline"][:]
    benchmarked = timeline[timeline["phase"] == b"benchmark"]
    rank_of = dict(zip(benchmarked["config_id"].tolist(), benchmarked["rank"].tolist()))
    ratios: dict[int, list[float]] = {}
    for row in results[results["status"] == b"ok"]:
        recorded = lookup[tuple(row[n].item() for n in names)]
        times = row["times_ms"][~np.isnan(row["times_ms"])]  # the first ones only, when raced
        rank = rank_of[int(row["config_id"])]
        ratios.setdefault(rank, []).extend(times / np.asarray(recorded.times_ms[: len(times)]))
        if len(times) == len(recorded.times_ms):  # a raced one's time is the median of its few
            ratios[rank].append(float(row["time_ms"]) / recorded.time_ms)
    return ratios


def test_device_bias_scales_each_ranks_times(tmp_path, pnpoly):
    out = tmp_path / "biased.h5"
    args = ["replay", str(pnpoly), "--device-bias", "1.0,1.1", "--max-fevals", "40", "--out", str(out)]
    proc = mpitune(2, args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    ratios = _ratios(out, pnpoly)
    assert sorted(ratios) == [0, 1]
    assert ratios[0] == pytest.approx([1.0] * len(ratios[0]), rel=1e-12)
    assert ratios[1] == pytest.approx([1.1] * len(ratios[1]), rel=1e-12)
    with h5py.File(out, "r") as f:
        assert '"device_bias": [1.0, 1.1]' in f.attrs["problem"]


def test_device_bias_sd_draws_the_same_factors_for_a_seed(tmp_path, pnpoly):
    problem, _ = replay_problem(measured.load(str(pnpoly)), Overrides(seed=7), device_bias_sd=0.2)
    expected = [replay.bias_factor(problem.kernel.replay, rank) for rank in range(2)]
    assert expected[0] != expected[1]
    seen = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.h5"
        args = [
            "replay",
            str(pnpoly),
            "--device-bias-sd",
            "0.2",
            "--seed",
            "7",
            "--max-fevals",
            "30",
            "--out",
            str(out),
        ]
        proc = mpitune(2, args, tmp_path)
        assert proc.returncode == 0, proc.stderr
        ratios = _ratios(out, pnpoly)
        for rank, factor in enumerate(expected):
            assert ratios[rank] == pytest.approx([factor] * len(ratios[rank]), rel=1e-12)
        with h5py.File(out, "r") as f:
            seen.append(np.sort(f["results"][:][["config_id", "time_ms"]], order="config_id"))
    assert np.array_equal(seen[0]["config_id"], seen[1]["config_id"])
    assert np.array_equal(seen[0]["time_ms"], seen[1]["time_ms"], equal_nan=True)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--device-bias", "1.0,0"], "each factor: must be greater than 0"),
        (["--device-bias", "1.0,x"], "not a number: 'x'"),
        (["--device-bias", "inf"], "not a finite number"),
        (["--device-bias-sd", "-0.1"], "must be at least 0"),
        (["--device-bias-sd", "nan"], "not a finite number"),
        (["--device-bias", "1.1", "--device-bias-sd", "0.1"], "not allowed with argument"),
    ],
)
def test_a_bad_device_bias_is_one_line(tmp_path, flags, said):
    proc = mpitune(2, ["replay", kt_cache(str(tmp_path / "c.json")), *flags], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert said in proc.stderr and "--device-bias" in proc.stderr


@pytest.mark.parametrize(
    "bias",
    [
        {"device_bias": (1.0, -1.0)},
        {"device_bias": (float("nan"),)},
        {"device_bias_sd": float("inf")},
        {"device_bias": (1.1,), "device_bias_sd": 0.1},
    ],
)
def test_replay_problem_checks_the_bias_it_is_given(tmp_path, bias):
    with pytest.raises(SpecError, match="device_bias"):
        replay_problem(measured.load(kt_cache(str(tmp_path / "c.json"))), Overrides(), **bias)


# A run of four configurations on one GPU rank with two compile workers, racing on the first launch
# in two passes, as CI cannot make one: (id, compile s, verify s, benchmark s, times ms, raced).
# 0, 2 and 3 lost on their first launch; 1 survived it, was compiled again (0.02 s) and timed whole.
GPU_RUN = (
    (0, 0.4, 0.01, 0.002, [5.0], True),
    (1, 0.02, 0.01, 0.004, [1.0, 1.0, 1.0], False),
    (2, 0.3, 0.01, 0.002, [4.0], True),
    (3, 0.2, 0.01, 0.002, [6.0], True),
)


def _gpu_run(path):
    """The file of ``GPU_RUN``: its spec (0.5 s) and start-up (0.5 s), each configuration's
    phases end to end from 1 s (1 twice: its first pass, then whole), and the background
    compiles of two workers, 1 compiled again after the first pass."""
    from mpitune.model.identity import ProblemIdentity
    from mpitune.model.result import Result
    from mpitune.model.timeline import PhaseRow
    from mpitune.store.cache import Cache, RunInfo

    params = {"x": [0, 1, 2, 3]}
    identity = ProblemIdentity("k", "", "cupy", (64,), (), {"x": (0, 1, 2, 3)}, (), 3)
    cache = Cache(str(path), identity, params, iterations=3)
    cache.start_run(RunInfo(1.0, 1, "brute_force", 0, None, None, 32, 4, "cmd", "0"), ["h"], ["GPU"], [1])
    rows = [PhaseRow(-1, -1, "spec", 0.0, 0.5), PhaseRow(-1, -1, "startup", 0.5, 1.0)]
    ahead = [(0, 1.0, 1.4), (1, 1.0, 1.02), (2, 1.02, 1.32), (3, 1.32, 1.52), (1, 1.532, 1.552)]
    rows += [PhaseRow(0, c, "compile_ahead", s, e) for c, s, e in ahead]
    now, results = 1.0, []
    for c, _, verify_s, *_ in [*GPU_RUN, GPU_RUN[1]]:
        rows += [
            PhaseRow(0, c, "verify", now, now + verify_s),
            PhaseRow(0, c, "benchmark", now + verify_s, now + 0.012),
        ]
        now += 0.012
    for c, compile_s, verify_s, benchmark_s, times, raced in GPU_RUN:
        result = Result(
            c, "ok", time_ms=float(np.median(times)), times_ms=times, compile_s=compile_s, verify_s=verify_s
        )
        results.append(replace(result, benchmark_s=benchmark_s, raced=raced, rank=0, batch=0))
    cache.append([cache.objective.evaluate(r, {"x": r.config_id}) for r in results], [(0, r) for r in rows], 0)
    cache.finish_run(now, "finished", 4)
    cache.close()
    return path


def test_a_replay_of_a_run_with_compile_workers_runs_its_clock(tmp_path, capsys):
    """The replay's clock from the recorded run: its spec and start-up; two compile workers
    compiling the chunk in order from 1 s while the rank measures (it waits for 0 until 1.4 s
    and for 3 until 1.52 s); the first pass as the run made it, 1 deferred and compiled again
    (as long as the run's repeated compile, 0.02 s) and measured whole; every configuration with
    the launches it got. Without compile workers, every compile in turn."""
    from mpitune.scheduling.run import tune
    from mpitune.scheduling.transport import LocalTransport
    from mpitune.store.reader import read

    source = _gpu_run(tmp_path / "gpu.h5")
    recorded = measured.load(str(source)).recorded
    assert (recorded.spec_s, recorded.startup_s, recorded.compile_workers) == (0.5, (0.5,), 2)
    assert recorded.raced and recorded.recompile_s == pytest.approx(0.02)
    walls = {}
    for workers in (None, 0):
        out = tmp_path / f"replay{workers}.h5"
        given = Overrides(cache_path=str(out), confirm=0, compile_workers=workers)
        load = partial(replay_problem, measured.load(str(source)), given, "brute_force")
        assert tune(load, "", transport=LocalTransport()) == 0
        data = read(str(out))
        walls[workers] = float(data.runs["wall_s"][0])
        timeline = data.timeline
        verified = timeline["config_id"][timeline["phase"] == "verify"].tolist()
        assert verified == ([0, 1, 2, 3, 1] if workers is None else [0, 1, 2, 3])
        assert {(r["config_id"], int(r["raced"]), int(r["launches"])) for r in data.results} == {
            (0, 1, 1),
            (1, 0, 3),
            (2, 1, 1),
            (3, 1, 1),
        }
    assert "simulated clock from an mpitune run: spec 0.50 s" in capsys.readouterr().out
    # 1.4 (0 compiled), 0's 0.012, 1's first pass 0.01 + 0.002, 2's 0.012, wait for 3 until 1.52,
    # its 0.012; 1 compiled again (0.02) and measured whole (0.014).
    assert walls[None] == pytest.approx(1.52 + 0.012 + 0.02 + 0.014)
    assert walls[0] == pytest.approx(1.0 + 0.4 + 0.02 + 0.3 + 0.2 + 4 * 0.01 + 0.002 + 0.004 + 0.002 + 0.002)


def test_a_kernel_tuner_cache_is_replayed_with_its_assumptions_and_any_compile_workers(tmp_path, capsys):
    """A Kernel Tuner cache records no start-up nor compile workers: none is charged, and it
    says so; with compile workers asked for, compiles overlap what the rank measures (every
    launch timed: racing would take two passes, compiling the survivors twice)."""
    from mpitune.scheduling.run import tune
    from mpitune.scheduling.transport import LocalTransport

    source = kt_cache(str(tmp_path / "c.json"))
    walls = {}
    for workers in (0, 2):
        out = tmp_path / f"kt{workers}.h5"
        given = Overrides(cache_path=str(out), confirm=0, compile_workers=workers, racing=False)
        load = partial(replay_problem, measured.load(source), given, "brute_force")
        assert tune(load, "", transport=LocalTransport()) == 0
        walls[workers] = report_json(out)["wall_s"]
    printed = capsys.readouterr().out
    assert "simulated clock from a Kernel Tuner cache; assumed: no spec loading or start-up" in printed
    assert walls[0] == pytest.approx(0.1 + 0.005 + 0.02 + 0.2 + 0.005 + 0.01 + 0.05 + 0.08 + 0.001 + 0.01)
    # Two workers compile from 0, in order: (1,1) until 0.1 and (2,1) until 0.15, (2,2) until
    # 0.23 on one, (1,2) until 0.2, (3,1) and (3,2) until 0.21 on the other. The rank waits for
    # (1,1), measures it (0.025), waits for (1,2) until 0.2, measures it (0.015), then for (2,2)
    # until 0.23, whose runtime error costs 0.001; the rest cost nothing more.
    assert walls[2] == pytest.approx(0.231)
