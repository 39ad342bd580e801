"""What the command line's flags make of a run's settings, in process: the flag wins over the
spec's field, for ``tune`` and ``replay`` alike, and a bad value is argparse's one line. And a
replay of several measured files: each rank's own, and the refusals, under mpiexec too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED_DATA, kt_cache, mpitune, write_scale_spec

from mpitune.cli.loading import overrides, problem_of_args, read_measured, replay_of_args, warm_replay
from mpitune.cli.parsers import replay_parser, tune_parser
from mpitune.errors import UserError
from mpitune.model.problem import Schedule
from mpitune.scheduling.before_mpi import WORLD_RANK_VARIABLES
from mpitune.spec.replay import replay_problem


def test_the_schedule_flag_overrides_the_spec_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(write_scale_spec(tmp_path, extra="schedule = 'refill'\n"))
    assert problem_of_args(tune_parser().parse_args([spec]))[1].schedule is Schedule.REFILL
    flagged = tune_parser().parse_args([spec, "--schedule", "batches"])
    assert problem_of_args(flagged)[1].schedule is Schedule.BATCHES
    source = kt_cache(str(tmp_path / "c.json"))
    for flags, schedule in (([], Schedule.AUTO), (["--schedule", "refill"], Schedule.REFILL)):
        args = replay_parser().parse_args([source, *flags])
        assert replay_problem(read_measured(args.caches[0]), overrides(args), args.strategy)[1].schedule is schedule


@pytest.mark.parametrize("parser", [tune_parser, replay_parser])
def test_a_bad_schedule_is_one_line_naming_the_flag_and_its_values(capsys, parser):
    with pytest.raises(SystemExit) as ended:
        parser().parse_args(["spec.py", "--schedule", "eager"])
    error = capsys.readouterr().err
    assert ended.value.code == 2 and error.count("\n") == 1, error
    assert "argument --schedule: invalid choice: 'eager'" in error
    assert all(value.value in error for value in Schedule)


def _two_models(tmp_path) -> list[str]:
    """One small kernel and space, measured on two device models: two Kernel Tuner caches."""
    paths = []
    for model in ("A", "B"):
        doc = json.loads(Path(kt_cache(str(tmp_path / "c.json"))).read_text())
        paths.append(tmp_path / f"model_{model}.json")
        paths[-1].write_text(json.dumps({**doc, "device_name": f"GPU {model}"}))
    return [str(p) for p in paths]


def test_replay_takes_several_files_and_names_its_output_after_the_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = _two_models(tmp_path)
    assert replay_parser().parse_args([first]).caches == [first]
    args = replay_parser().parse_args([first, second, "--max-fevals", "3"])
    problem, settings = replay_of_args(args)
    assert [f.path for f in problem.kernel.replay.files] == [first, second] and settings.max_fevals == 3
    assert settings.cache_path == str(tmp_path / "model_A.replay.h5")
    # Any of the files as the output is refused: it would be written over.
    for given in (first, second):
        with pytest.raises(UserError, match=f"is the input {given}"):
            replay_of_args(replay_parser().parse_args([first, second, "--out", given]))


def test_each_rank_warms_the_file_it_replays(tmp_path, monkeypatch):
    caches = _two_models(tmp_path)
    for name in WORLD_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    args = replay_parser().parse_args(caches)
    for rank, device in ((1, "GPU B"), (2, "GPU A"), (3, "GPU B")):
        monkeypatch.setenv("PMI_RANK", str(rank))
        assert warm_replay(args).device_name == device


def test_a_job_of_two_kernels_is_refused_on_every_rank_in_one_line(tmp_path):
    caches = SHARED_DATA / "caches"
    a100, gemm = str(caches / "convolution_A100.json.gz"), str(caches / "gemm_RTX_3090.json.gz")
    if not (Path(a100).is_file() and Path(gemm).is_file()):
        pytest.skip(f"needs the shared caches in {caches}")
    proc = mpitune(2, ["replay", a100, gemm, "--out", str(tmp_path / "out.h5")], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"mpitune: error: {a100} and {gemm} cannot be replayed together: they measured the kernels" in proc.stderr
    assert not (tmp_path / "out.h5").exists()


def test_a_job_of_two_device_models_is_refused_as_mixed_devices_unless_each_is_tuned_apart(tmp_path):
    """Rank 0 replays the first file's device model and rank 1 the second's: today's check of one
    device model a job refuses them, as it would real GPUs of two models."""
    proc = mpitune(2, ["replay", *_two_models(tmp_path), "--out", str(tmp_path / "out.h5")], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "the ranks have different devices (GPU A (replayed): ranks 0; GPU B (replayed): ranks 1)" in proc.stderr
