"""``python -m mpitune plan``: each rank count replayed on the simulated clock in one process, as
a table or JSON with the sbatch line; its one-rank wall is the replay's."""

import json
import re
from functools import partial

import pytest
from conftest import kt_cache, report_json

from mpitune.cli import main
from mpitune.scheduling.loop import tune
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
    with pytest.raises(SystemExit) as refused:
        main(["plan", source, "--time-per-job", "1m"])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "leaves nothing after the 90 s a job drains" in error
