"""Confirmation at the end of a search, driven by the real rounds in one process over replay
backends (the Manager's world of tests/scheduling/test_manager.py): what is timed again, what the
file keeps, when it is skipped, and device factors recovered from biased ranks."""

from __future__ import annotations

import json
from dataclasses import replace

import h5py
import numpy as np
import pytest
from test_manager import Ranks, recorded

from mpitune.backends.replay import ReplayBackend
from mpitune.offline.report import render
from mpitune.scheduling.devices.confirming import ANCHORS, LAUNCHES_PER_CANDIDATE, rounds_for, spread
from mpitune.scheduling.messages import StopReason


def tables(path: str) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {name: f[name][...] for name in ("results", "retimed", "confirmed", "device_factors")}


def biased(ranks: Ranks, factors: tuple[float, ...]) -> Ranks:
    kernel = ranks.setup.problem.kernel
    problem = replace(ranks.setup.problem, kernel=replace(kernel, replay=replace(kernel.replay, device_bias=factors)))
    ranks.setup.problem = problem
    ranks.backends = [ReplayBackend(problem.kernel, rank) for rank in range(len(ranks.backends))]
    return ranks


def test_a_finished_search_confirms_its_best_on_every_rank_and_keeps_the_search_rows(tmp_path, capsys):
    ranks = Ranks(tmp_path, 3, strategy="brute_force")
    manager = ranks.open()
    assert ranks.run(manager) is StopReason.FINISHED
    t = tables(ranks.cache_path)
    ids, runs = recorded(ranks.cache_path)
    assert sorted(ids) == list(range(40)) and runs == [("finished", 40)]  # no row of the search added
    confirmed = t["confirmed"]
    # The five best: 100 / (x * y) for (8, 5), (7, 5), (8, 4), (6, 5), (7, 4); every launch recorded alike.
    assert len(confirmed) == 5 and confirmed["winner"].tolist() == [1, 0, 0, 0, 0]
    space = manager.space
    winner = space.config(int(confirmed["config_id"][0]))
    assert (winner["x"], winner["y"]) == (8, 5) and confirmed["tied"].sum() == 0
    assert confirmed["median_ms"][0] == 2.5
    launches = t["retimed"][t["retimed"]["purpose"] == b"confirm"]
    assert len(launches) == 5 * 3 * rounds_for(3)
    assert sorted(set(launches["rank"].tolist())) == [0, 1, 2]
    confirm_factors = t["device_factors"][t["device_factors"]["source"] == b"confirm"]
    assert confirm_factors["factor"].tolist() == [1.0, 1.0, 1.0]
    out = capsys.readouterr().out
    assert "mpitune: confirmed best 2.5 ms [2.5, 2.5] (x=8, y=5), no ties (5 candidates" in out
    summary = json.loads(render(ranks.cache_path, as_json=True))
    assert summary["confirmation"] == {"winner": {"x": 8, "y": 5}, "winner_ms": 2.5, "ci_ms": [2.5, 2.5], "tied": []}
    cost = summary["confirmation_cost"]
    assert list(cost) == ["run", "candidates", "launches", "seconds", "share_of_run", "owed"]
    assert (cost["run"], cost["candidates"], cost["launches"]) == (0, 5, 5 * 3 * rounds_for(3))
    assert 0 < cost["share_of_run"] < 1
    assert [(c["rank"], c["factor"], c["flagged"]) for c in summary["calibration"]] == [
        (0, 1.0, False),
        (1, 1.0, False),
        (2, 1.0, False),
    ]
    assert "winner 2.5 ms [2.5, 2.5] x=8, y=5" in render(ranks.cache_path)


def test_a_rerun_with_nothing_new_does_not_confirm_again(tmp_path, caplog):
    first = Ranks(tmp_path, 2, strategy="brute_force")
    first.run(first.open())
    again = Ranks(tmp_path, 2, strategy="brute_force")
    with caplog.at_level("INFO"):
        again.run(again.open())
    t = tables(again.cache_path)
    assert set(t["confirmed"]["run"].tolist()) == {0} and set(t["retimed"]["run"].tolist()) == {0}
    assert "judged these 5 candidates: not timed again" in caplog.text
    assert json.loads(render(again.cache_path, as_json=True))["confirmation"]["winner"] == {"x": 8, "y": 5}


def test_confirm_zero_and_a_search_cut_short_confirm_nothing(tmp_path):
    (tmp_path / "off").mkdir()
    (tmp_path / "cut").mkdir()
    off = Ranks(tmp_path / "off", 2, strategy="brute_force", confirm=0)
    assert off.run(off.open()) is StopReason.FINISHED
    assert set(tables(off.cache_path)["retimed"]["purpose"]) == {b"calibrate"}  # calibration is not confirmation
    cut = Ranks(tmp_path / "cut", 2, strategy="brute_force", batch_size=2, time_limit_s=3.0)
    assert cut.run(cut.open()) is StopReason.TIME_LIMIT
    assert b"confirm" not in set(tables(cut.cache_path)["retimed"]["purpose"])
    assert json.loads(render(cut.cache_path, as_json=True))["confirmation"] is None


def test_biased_ranks_are_calibrated_and_the_most_biased_is_flagged(tmp_path):
    ranks = biased(Ranks(tmp_path, 4, strategy="brute_force"), (1.0, 1.01, 0.995, 1.15))
    ranks.run(ranks.open())
    factors = tables(ranks.cache_path)["device_factors"]
    factors = factors[factors["source"] == b"confirm"]
    relative = factors["factor"] / factors["factor"][0]
    assert np.allclose(relative, [1.0, 1.01, 0.995, 1.15], rtol=1e-9)  # every launch recorded alike: exact
    assert factors["flagged"].tolist() == [0, 0, 0, 1]
    summary = json.loads(render(ranks.cache_path, as_json=True))
    assert summary["confirmation"]["winner"] == {"x": 8, "y": 5}
    # Calibrated times are in the ranks' common unit: their geometric mean device's.
    common = float(np.prod([1.0, 1.01, 0.995, 1.15]) ** 0.25)
    assert summary["confirmation"]["winner_ms"] == pytest.approx(2.5 * common, rel=1e-9)


def test_rounds_share_thirty_launches_per_candidate_and_shrink_for_slow_kernels():
    assert [rounds_for(n) for n in (1, 2, 3, 8, 64)] == [30, 15, 10, 5, 5]
    # Five candidates of 6.8 ms on one rank after a 14 s run: 30 rounds would be 7 % of it.
    assert rounds_for(1, round_s=5 * 6.8e-3, run_s=14.0) == 12
    assert rounds_for(1, round_s=10.0, run_s=14.0) == 5  # never below what a factor needs


def test_many_ranks_time_the_two_best_everywhere_and_spread_the_others_over_enough_ranks():
    shares = spread(list(range(12)), 24, 5)
    assert len(shares) == 24 and all(share[:ANCHORS] == (0, 1) for share in shares)
    assert {len(share) for share in shares} == {2 + 3}  # 10 others x 30 launches over 24 x 5 rounds: 3 a rank
    launches = {i: 5 * sum(i in share for share in shares) for i in range(12)}
    assert launches[0] == launches[1] == 24 * 5
    assert all(LAUNCHES_PER_CANDIDATE <= launches[i] < 24 * 5 for i in range(2, 12)), launches
    # Where spreading would not halve what the others are launched, all go everywhere.
    assert spread([7, 3, 5, 9, 1], 3, 10) == [(7, 3, 5, 9, 1)] * 3
    assert spread([4, 2], 64, 5) == [(4, 2)] * 64


def test_a_confirmation_on_many_ranks_spreads_its_candidates_and_names_the_same_winner(tmp_path, capsys):
    ranks = biased(Ranks(tmp_path, 24, strategy="brute_force"), tuple(1.0 + 0.002 * r for r in range(24)))
    assert ranks.run(ranks.open()) is StopReason.FINISHED
    t = tables(ranks.cache_path)
    launches = t["retimed"][t["retimed"]["purpose"] == b"confirm"]
    per_candidate = {int(c): int((launches["config_id"] == c).sum()) for c in set(launches["config_id"].tolist())}
    assert len(per_candidate) == 5
    everywhere = sorted(n for n in per_candidate.values() if n == 24 * 5)
    assert len(everywhere) == ANCHORS  # the two best on every rank ...
    assert all(LAUNCHES_PER_CANDIDATE <= n < 24 * 5 for n in per_candidate.values() if n != 24 * 5)  # the rest
    confirmed = t["confirmed"]
    winner = ranks.setup.space.config(int(confirmed["config_id"][confirmed["winner"] == 1][0]))
    assert (winner["x"], winner["y"]) == (8, 5)
    factors = t["device_factors"][t["device_factors"]["source"] == b"confirm"]
    assert np.allclose(factors["factor"] / factors["factor"][0], [1.0 + 0.002 * r for r in range(24)], rtol=1e-9)
    assert "the 2 best on every rank and up to 3 a rank" in capsys.readouterr().out


class _Always(dict):
    """``Ranks.before_record`` that calls ``fn`` before every report is recorded."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        return self.fn


def _stop_while_confirming(manager) -> None:
    """A signal once the confirmation is out (what SIGTERM's handler does)."""
    if any(flight.retime is not None for flight in manager.in_flight.values()):
        manager.request_stop(StopReason.SIGNAL)


def test_a_stop_once_every_launch_is_made_keeps_the_verdict(tmp_path, capsys):
    """Slurm's SIGTERM after the ranks made every launch of the confirmation: the verdict is
    reached and kept, not thrown away for the next run to time again."""
    ranks = Ranks(tmp_path, 3, strategy="brute_force")
    ranks.before_record = _Always(_stop_while_confirming)
    assert ranks.run(ranks.open()) is StopReason.SIGNAL
    t = tables(ranks.cache_path)
    assert len(t["confirmed"]) == 5 and t["confirmed"]["winner"].tolist() == [1, 0, 0, 0, 0]
    assert set(t["retimed"]["purpose"].tolist()) <= {b"calibrate", b"confirm"}  # nothing owed
    out = capsys.readouterr().out
    assert "mpitune: confirmed best 2.5 ms" in out and "mpitune: best: 2.5 ms (x=8, y=5)" in out


def test_a_confirmation_cut_short_is_finished_by_the_next_run_from_what_it_owes(tmp_path, capsys, caplog, monkeypatch):
    """A stop between two launches: each rank reports the launches it made (here its first 7),
    the file keeps them with what is still owed, and the next run, on other ranks, makes only
    what is owed, in rounds after the earlier ones, and judges every launch together."""
    first = Ranks(tmp_path, 2, strategy="brute_force", confirm=0)
    first.run(first.open())
    retime = ReplayBackend.retime

    def cut(self, order, timeline, compiled=None, stopping=None):
        made = retime(self, order, timeline, compiled, stopping)
        return made[:7] if order.phase == "confirm" else made

    monkeypatch.setattr(ReplayBackend, "retime", cut)
    second = Ranks(tmp_path, 2, strategy="brute_force")
    second.before_record = _Always(_stop_while_confirming)
    assert second.run(second.open()) is StopReason.SIGNAL
    t = tables(second.cache_path)
    made, owed = (t["retimed"][t["retimed"]["purpose"] == p] for p in (b"confirm", b"unmade"))
    planned = 5 * 2 * 5  # 5 rounds, the least: more would cost over 3 % of this slow replay
    assert len(made) == 14 and len(owed) == planned - 14 and set(made["run"].tolist()) == {1}
    assert not len(t["confirmed"])
    out = capsys.readouterr().out
    assert f"confirmation cut short by the stop: 14 launches made and kept, {planned - 14} still owed" in out
    summary = json.loads(render(second.cache_path, as_json=True))
    assert summary["confirmation"] is None and summary["confirmation_cost"]["owed"] == planned - 14
    assert "confirmation cut short by a stop (run 1: 5 candidates, 14 launches made and kept" in render(
        second.cache_path
    )

    monkeypatch.setattr(ReplayBackend, "retime", retime)
    third = Ranks(tmp_path, 3, strategy="brute_force")
    with caplog.at_level("INFO"):
        assert third.run(third.open()) is StopReason.FINISHED
    assert "finishing the confirmation of run 1: 14 launches kept" in caplog.text
    t = tables(third.cache_path)
    mine = t["retimed"][t["retimed"]["run"] == 2]
    # Each rank made its first 7 launches: two rounds of which the second had 2 of the 5; a
    # candidate owes at most 10 - 2, which 3 ranks make in 3 rounds, numbered after round 4.
    assert len(mine) == 5 * 3 * 3 and set(mine["purpose"].tolist()) == {b"confirm"}
    assert mine["round"].min() == 5
    confirmed = t["confirmed"]
    assert set(confirmed["run"].tolist()) == {2} and int(confirmed["launches"].sum()) == 14 + 45
    summary = json.loads(render(third.cache_path, as_json=True))
    assert summary["confirmation"]["winner"] == {"x": 8, "y": 5}
    assert summary["confirmation_cost"]["launches"] == 59 and summary["confirmation_cost"]["owed"] == 0
    out = capsys.readouterr().out
    assert "with run 1's 14 launches" in out and "mpitune: best: 2.5 ms (x=8, y=5)" in out
