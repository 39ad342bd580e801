"""``python -m mpitune plan``: each rank count replayed on the simulated clock in one process, as
a table or JSON with the sbatch line; its one-rank wall is the replay's."""

import json
import re
from functools import partial

import pytest
from conftest import kt_cache, report_json, write_scale_spec

from mpitune.backends.kernel_cache_reach import LOAD_S
from mpitune.cli import main
from mpitune.cli.plan_basis import basis
from mpitune.cli.planning import parser
from mpitune.model.problem import Schedule
from mpitune.scheduling.run import tune
from mpitune.scheduling.transport import LocalTransport
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured


def test_plan_predicts_each_rank_count_as_its_replay(tmp_path, capsys):
    source = kt_cache(str(tmp_path / "c.json"))
    assert (
        main(["plan", source, "--ranks", "1,2,5", "--strategy", "brute_force", "--gpus-per-node", "4", "--json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["ranks"]
    assert [r["ranks"] for r in rows] == [1, 2, 5]
    assert set(rows[0]) == {"ranks", "wall_s", "efficiency", "gpu_hours", "jobs", "sbatch"}
    assert rows[0]["efficiency"] == 1.0 and rows[1]["wall_s"] < rows[0]["wall_s"]
    for r in rows:
        assert r["efficiency"] == pytest.approx(rows[0]["wall_s"] / (r["ranks"] * r["wall_s"]))
        assert r["gpu_hours"] == pytest.approx(r["ranks"] * r["wall_s"] / 3600) and r["jobs"] == 1
    assert rows[2]["sbatch"] == "sbatch -N 2 --ntasks-per-node=4 --gres=gpu:4 --time=0:06:00 jobscripts/das6.sh SPEC"
    # One rank: the wall time a replay of the same data reports.
    out = tmp_path / "replay.h5"
    load = partial(replay_problem, measured.load(source), Overrides(cache_path=str(out)), "brute_force")
    assert tune(load, "", transport=LocalTransport()) == 0
    assert rows[0]["wall_s"] == pytest.approx(report_json(out)["wall_s"])


def test_the_table_says_what_it_rests_on_and_a_bad_duration_is_one_line(tmp_path, capsys):
    source = kt_cache(str(tmp_path / "c.json"))
    assert main(["plan", source, "--ranks", "3", "--time-per-job", "15m", "--gpus-per-node", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "simulated clock from a Kernel Tuner cache; assumed:" in printed[0]
    assert re.match(r" +3 +\d+\.\ds +\d+\.\d% +\d\.\d{3} +1  sbatch -N 2 --ntasks-per-node=2 --gres=gpu:2 ", printed[2])
    assert printed[-1].startswith("uncertainty: ")
    assert printed[-1].endswith(
        "taken to be a Test GPU: on other or mixed device models the times differ "
        "(a job with --devices each runs each model apart: plan each from a file of that model)"
    )
    with pytest.raises(SystemExit) as refused:
        main(["plan", source, "--time-per-job", "1m"])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "leaves nothing after the 90 s a job drains" in error


def test_plan_from_a_spec_runs_a_pilot_and_predicts_its_whole_space(tmp_path, capsys):
    """A pilot of the spec's own strategy on its real (C) backend, kept; its 8 measured
    configurations keep their costs, the other 10 of the space get predicted ones."""
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0], "U": [1, 2, 3]}')
    spec.write_text(spec.read_text() + 'strategy = "random_sample"\n')
    pilot = tmp_path / "pilot.h5"
    argv = ["plan", str(spec), "--ranks", "1,2", "--pilot", "8", "--pilot-out", str(pilot), "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    planned = json.loads(captured.out)
    assert "mpitune: batch 1: " in captured.err  # the pilot's progress, beside the JSON
    assert planned["configurations"] == 18
    assert "costs of 8 from a pilot of 8 configurations in " in planned["rests_on"]
    assert "strategy random_sample" in planned["rests_on"] and "the other 10 predicted" in planned["rests_on"]
    assert "-fold cross-validation" in planned["uncertainty"]
    run = measured.load(str(pilot))
    assert len(run.configs) == 8 and run.recorded.complete
    rows = planned["ranks"]
    # The whole space: more than the 8 measured cost.
    assert rows[0]["wall_s"] > sum(m.compile_s + m.verify_s + m.benchmark_s for m in run.measurements)
    assert rows[1]["wall_s"] < rows[0]["wall_s"]
    assert rows[1]["sbatch"].startswith("sbatch -N 2 --ntasks-per-node=1 --gres=gpu:1 --time=")
    assert rows[1]["sbatch"].endswith(f"jobscripts/das6.sh {spec}")
    # The kept pilot is not measured again.
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _prior(path, steps):
    """A Kernel Tuner cache of the scale spec's STEP values ``steps``: every configuration
    compiles in 100 ms, verifies in 10 and benchmarks in 50."""
    cache = {
        f"{s},0": {"STEP": s, "MODE": 0, "time": 1.0, "times": [1.0, 1.0, 1.0], "compile_time": 100.0}
        | {"verification_time": 10.0, "benchmark_time": 50.0}
        for s in steps
    }
    head = {"device_name": "Test GPU", "kernel_name": "scale", "tune_params": {"STEP": steps, "MODE": [0]}}
    path.write_text(json.dumps({**head, "cache": cache}))
    return str(path)


@pytest.mark.parametrize("schedule", ["batches", "refill"])
def test_plan_from_a_spec_with_a_prior_predicts_what_it_did_not_measure(tmp_path, capsys, schedule):
    """The prior measured 3 of the spec's 4 configurations at 0.16 s each: the fourth is predicted
    as much, so that the search takes 4 x 0.16 s on one rank (a Kernel Tuner cache records no
    start-up), half on two. In batches both go out at once, before anything is known; refilled,
    each rank's second goes out once its first is in, with the reference every rank times once
    (calibration: its compile, 0.1 s, a warm-up launch, 1 ms, since the prior's 10 ms verification
    also checked the answer on the host, and its 5 launches, 5 ms)."""
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8], "MODE": [0]}', extra="confirm = False\n")
    prior = _prior(tmp_path / "prior.json", [1, 2, 4])
    argv = ["plan", str(spec), "--prior", prior, "--ranks", "1,2", "--strategy", "brute_force", "--json"]
    argv += ["--schedule", schedule]
    assert main(argv) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["configurations"] == 4
    assert f"costs of 3 from {prior}, measured on Test GPU, the other 1 predicted" in planned["rests_on"]
    walls = [r["wall_s"] for r in planned["ranks"]]
    assert walls == pytest.approx([0.64, 0.32 + (0.106 if schedule == "refill" else 0.0)], rel=0.01)
    assert "too few measured configurations passed to tell" in planned["uncertainty"]
    # --time: twice the margin, where the error could not be told: 1.25 x 2 x 0.64 s + 5 min.
    assert "--time=0:06:00 " in planned["ranks"][0]["sbatch"]
    assert main(["plan", prior, "--prior", prior]) == 2  # a results file is planned from itself
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--pilot, --pilot-out and --prior plan from a spec" in error
    lacking = tmp_path / "lacking.json"
    lacking.write_text(json.dumps({"tune_params": {"STEP": [1]}, "cache": {"1": {"STEP": 1, "time": 1.0}}}))
    assert main(["plan", str(spec), "--prior", str(lacking)]) == 2
    assert "has no parameter MODE of the spec's: not the same kernel" in capsys.readouterr().err


def test_plan_from_a_spec_replays_with_its_settings(tmp_path):
    """Its schedule, confirmation and calibration reach each replay as the spec sets them."""
    extra = "confirm = False\ncalibrate = False\nschedule = 'batches'\n"
    spec = write_scale_spec(tmp_path, '{"STEP": [1, 2, 4, 8], "MODE": [0]}', extra=extra)
    prior = _prior(tmp_path / "prior.json", [1, 2, 4])
    rests = basis(parser().parse_args([str(spec), "--prior", prior]), str(tmp_path))
    _, settings = replay_problem(rests.data, rests.given, rests.strategy, rests.strategy_options, rests.racing)
    assert (settings.schedule, settings.confirm, settings.calibrate) == (Schedule.BATCHES, 0, False)


def test_plan_charges_candidates_timed_again_as_the_kernel_cache_reaches(tmp_path, capsys):
    """Shared, a candidate the confirmation times again is loaded (LOAD_S), not compiled for its
    recorded 100 or 200 ms again, on every rank; the line says which was assumed."""
    source = kt_cache(str(tmp_path / "c.json"))
    for workers in ("0", "4"):  # compiled in turn, or by compile workers beside the device
        walls = {}
        for reach in ("shared", "node"):
            command = ["plan", source, "--ranks", "2", "--strategy", "brute_force", "--compile-workers", workers]
            assert main([*command, "--kernel-cache", reach]) == 0
            printed = capsys.readouterr().out.splitlines()
            walls[reach] = float(printed[2].split()[1].rstrip("s"))
            said = "loaded from the kernel cache" if reach == "shared" else "compiled again on each rank"
            assert f"a candidate timed again (confirmation, calibration) is {said}" in printed[0]
        # In turn both candidates' compiles (0.1 + 0.2 s) go; with workers, the longer one.
        saved_s = 0.3 if workers == "0" else 0.2
        assert walls["node"] - walls["shared"] >= saved_s - 2 * LOAD_S - 0.05  # the table rounds to 0.1 s
