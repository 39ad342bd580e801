"""What the command line's flags make of a run's settings, in process: the flag wins over the
spec's field, for ``tune`` and ``replay`` alike, and a bad value is argparse's one line."""

from __future__ import annotations

import pytest
from conftest import kt_cache, write_scale_spec

from mpitune.cli.loading import overrides, problem_of_args, read_measured
from mpitune.cli.parsers import replay_parser, tune_parser
from mpitune.model.problem import Schedule
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
        assert replay_problem(read_measured(args.cache), overrides(args), args.strategy)[1].schedule is schedule


@pytest.mark.parametrize("parser", [tune_parser, replay_parser])
def test_a_bad_schedule_is_one_line_naming_the_flag_and_its_values(capsys, parser):
    with pytest.raises(SystemExit) as ended:
        parser().parse_args(["spec.py", "--schedule", "eager"])
    error = capsys.readouterr().err
    assert ended.value.code == 2 and error.count("\n") == 1, error
    assert "argument --schedule: invalid choice: 'eager'" in error
    assert all(value.value in error for value in Schedule)
