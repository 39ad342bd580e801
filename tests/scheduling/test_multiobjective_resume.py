"""A multi-objective search stopped and resumed: nsga2 is rebuilt from the asks and the tells the
file records, its score vectors recomputed from the stored rows, and asks what an uninterrupted
search asks; the front the run records is the one computed from its rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_manager import Ranks
from test_resume import stopped_after

from mpitune.model.objective import Aim, expression
from mpitune.scheduling.messages import StopReason
from mpitune.store.reader import read


def two_objectives(tmp_path: Path) -> Ranks:
    """The replayed 40 configurations, time = 100 / (x * y), against x + y, both lower is better."""
    ranks = Ranks(tmp_path, 2, strategy="nsga2", seed=5, batch_size=2)
    size = (expression("size", "x + y", {}),)
    ranks.setup.problem = replace(ranks.setup.problem, aim=Aim(("time", "size"), (False, False), size))
    return ranks


def test_a_stopped_and_resumed_nsga2_search_asks_what_an_uninterrupted_one_asks(tmp_path, caplog):
    caplog.set_level("INFO")
    (tmp_path / "whole").mkdir(), (tmp_path / "split").mkdir()
    whole = two_objectives(tmp_path / "whole")
    assert whole.run(whole.open()) is StopReason.FINISHED
    first = two_objectives(tmp_path / "split")
    assert stopped_after(first, 3) is StopReason.SIGNAL
    second = two_objectives(tmp_path / "split")
    assert second.run(second.open()) is StopReason.FINISHED
    assert "resuming the saved state of strategy nsga2" in caplog.text and "does not replay" not in caplog.text
    assert [sorted(b) for b in first.batches + second.batches] == [sorted(b) for b in whole.batches]
    data = read(second.cache_path)
    front = sorted(data.results["config_id"][data.front_rows()].tolist())
    assert sorted(data.recorded_front.tolist()) == front and len(front) > 2


def test_a_search_of_other_objectives_is_not_continued(tmp_path, caplog):
    """The saved search holds scores of the objectives it had: with the second objective's direction
    changed it starts afresh (knowing every recorded result), as with a single objective changed."""
    caplog.set_level("INFO")
    first = two_objectives(tmp_path)
    assert stopped_after(first, 2) is StopReason.SIGNAL
    second = two_objectives(tmp_path)
    aim = replace(second.setup.problem.aim, directions=(False, True))  # size maximised
    second.setup.problem = replace(second.setup.problem, aim=aim)
    assert second.run(second.open()) is StopReason.FINISHED
    assert "resuming the saved state" not in caplog.text
    assert sorted(i for b in first.batches + second.batches for i in b) == list(range(40))
