"""Refilled runs (scheduling/handouts.py) driven by the real rounds over ranks in this process, each
rank with its own replay backend and simulated clock (test_manager.py's ``Ranks``)."""

from __future__ import annotations

import logging
from dataclasses import replace

import h5py
import numpy as np
from test_manager import Ranks, recorded

from mpitune.model.timeline import BACKGROUND_PHASES
from mpitune.scheduling.handouts import Handouts
from mpitune.scheduling.messages import StopReason


def growing(x: int, y: int) -> float:
    """Benchmark seconds: from 0.03 to 1.2, growing with x and y."""
    return 0.3 * x * y / 10


def test_a_refilled_run_records_every_configuration_once_and_what_each_ask_knew(tmp_path, capsys):
    ranks = Ranks(tmp_path, 3, strategy="genetic_algorithm", schedule="refill", seed=2)
    manager = ranks.open()
    assert ranks.run(manager) is StopReason.FINISHED
    ids, runs = recorded(ranks.cache_path)
    assert sorted(ids) == list(range(40)) and runs == [("finished", 40)]
    with h5py.File(ranks.cache_path, "r") as f:
        told = f["told"][...]
        asked_batches = np.unique(f["asked"]["batch"])
        ranks_measured = set(f["results"]["rank"].tolist())
        assert len(f["in_flight"]) == 0
    # One told count per ask, never falling, from nothing known at the first ask.
    assert told["batch"].tolist() == asked_batches.tolist()
    assert told["rows"][0] == 0 and np.all(np.diff(told["rows"]) >= 0) and told["rows"][-1] < 40
    assert ranks_measured == {0, 1, 2}
    out = capsys.readouterr().out
    assert "mpitune: best: 2.5 ms (x=8, y=5)" in out


def test_refilled_ranks_wait_less_than_batches(tmp_path):
    walls = {}
    for schedule in ("batches", "refill"):
        (tmp_path / schedule).mkdir()
        ranks = Ranks(
            tmp_path / schedule,
            3,
            growing,
            strategy="random_sample",
            schedule=schedule,
            batch_size=3,
            max_fevals=32,
            seed=1,
            confirm=0,
            calibrate=False,
        )
        manager = ranks.open()
        assert ranks.run(manager) is StopReason.MAX_FEVALS
        walls[schedule] = ranks.clock.now()
        ids, _ = recorded(ranks.cache_path)
        assert len(ids) == len(set(ids)) == 32
    # The same 32 configurations (random sampling asks the same whatever it was told), one per
    # rank at a time, on simulated clocks: a batch waits for its slowest rank, a refilled rank
    # does not. (Rank 0 measures beside its hand-outs under both policies; before it did, under
    # batches only between them, and refill's lead was over 3 %.)
    assert walls["refill"] < 0.99 * walls["batches"]


def test_a_refilled_run_cut_short_resumes_its_search(tmp_path, caplog):
    first = Ranks(tmp_path, 3, strategy="genetic_algorithm", schedule="refill", max_fevals=11, seed=5)
    assert first.run(first.open()) is StopReason.MAX_FEVALS
    before, _ = recorded(first.cache_path)
    second = Ranks(tmp_path, 2, strategy="genetic_algorithm", schedule="refill", seed=5)
    with caplog.at_level(logging.INFO):
        manager = second.open()
    assert "resuming the saved state of strategy genetic_algorithm" in caplog.text
    assert "does not replay" not in caplog.text
    assert second.run(manager) is StopReason.FINISHED
    ids, runs = recorded(first.cache_path)
    assert sorted(ids) == list(range(40)) and runs == [("max_fevals", 11), ("finished", 29)]
    assert not set(before) & set(ids[len(before) :])


def test_every_ranks_phases_add_up_to_its_wall_in_a_refilled_run(tmp_path):
    ranks = Ranks(tmp_path, 3, growing, strategy="genetic_algorithm", schedule="refill", max_fevals=20, seed=4)
    assert ranks.run(ranks.open()) is StopReason.MAX_FEVALS
    with h5py.File(ranks.cache_path, "r") as f:
        rows = f["timeline"][...]
        wall_s = float(f["runs"]["wall_s"][0])
    for rank in range(3):
        mine = rows[(rows["rank"] == rank) & (~np.isin(np.char.strip(rows["phase"].astype(str)), BACKGROUND_PHASES))]
        mine = np.sort(mine, order=["start_s", "end_s"])
        assert np.all(mine["start_s"][1:] >= mine["end_s"][:-1] - 1e-9), f"rank {rank}'s phases overlap"
        assert float(np.sum(mine["end_s"] - mine["start_s"])) <= wall_s + 1e-6


def test_rank_0_measures_beside_its_hand_outs(tmp_path):
    ranks = Ranks(tmp_path, 3, growing, strategy="genetic_algorithm", schedule="refill", max_fevals=24, seed=4)
    assert ranks.run(ranks.open()) is StopReason.MAX_FEVALS
    with h5py.File(ranks.cache_path, "r") as f:
        mine = f["results"][f["results"]["rank"] == 0]
    # Orders went out to the workers while rank 0 measured one of its own: its lane measured it
    # while its main thread took reports and handed out (in its main thread it could not).
    during = [
        order.now_s
        for orders in ranks.orders
        for rank, order in enumerate(orders)
        if rank > 0 and order.ids and any(r["started_s"] < order.now_s < r["finished_s"] for r in mine)
    ]
    assert len(mine) >= 3 and during


def test_a_refilled_run_hands_out_nothing_that_would_end_after_the_time_limit(tmp_path, capsys):
    # Every configuration takes 0.5 simulated seconds; no calibration or racing to change that.
    ranks = Ranks(tmp_path, 3, strategy="random_sample", schedule="refill", batch_size=3, time_limit_s=3.2)
    ranks.setup.settings = replace(ranks.setup.settings, calibrate=False, racing=False)
    manager = ranks.open()
    assert ranks.run(manager) is StopReason.TIME_LIMIT
    with h5py.File(ranks.cache_path, "r") as f:
        finished_s = f["results"]["finished_s"]
        assert len(finished_s) >= 12 and float(np.max(finished_s)) <= 3.2
    assert "stopped early (time_limit)" in capsys.readouterr().out


def test_ranks_that_compile_in_turn_get_their_next_chunk_only_once_they_ran_out(tmp_path):
    """Without compile workers a queued chunk hides nothing but rank 0's answer, and would race
    against the best known a whole chunk earlier: each rank holds one chunk, dealt after the
    rank's previous chunk ended, so it races against everything measured by then."""
    ranks = Ranks(tmp_path, 3, growing, strategy="brute_force", schedule="refill", batch_size=12, confirm=0)
    manager = ranks.open()
    assert manager.compiles_in_turn  # the ranks' placements have no compile workers
    assert ranks.run(manager) is StopReason.FINISHED
    with h5py.File(ranks.cache_path, "r") as f:
        results = f["results"][...]
    ended = {(int(r["rank"]), int(r["batch"])): 0.0 for r in results}
    for r in results:
        key = (int(r["rank"]), int(r["batch"]))
        ended[key] = max(ended[key], float(r["finished_s"]))
    dealt = 0
    for orders in ranks.orders:
        for rank, order in enumerate(orders):
            earlier = [s for (k, b), s in ended.items() if k == rank and b < order.batch]
            if order.ids and earlier:
                assert order.now_s >= max(earlier) - 1e-9, (rank, order.batch)
                dealt += 1
    assert dealt >= 3  # refills happened, several chunks a rank
    assert len(ids := recorded(ranks.cache_path)[0]) == len(set(ids)) == 40


def test_the_rest_of_a_search_goes_out_at_once_costliest_first_once_one_would_end_last(tmp_path):
    """Pulled in order, a costly configuration near the end starts last and every rank waits for
    it. Once it takes twice what is left a rank, and twice the median left, the rest goes to every
    rank at once, costliest first; not before, nor where what is left costs alike."""
    handouts = Handouts(Ranks(tmp_path, 8, strategy="brute_force", schedule="refill").open())
    manager = handouts.manager
    assert manager.costs is not None and manager.compiles_in_turn
    ids = list(range(40))
    manager.costs.learn_values(ids, [4.0 if i % 5 == 4 else 0.5 for i in ids])  # y == 5: 8 times as costly
    manager.strategy.ask(25)
    assert handouts._last(15, 0.0) is None  # 18 s left over 8 ranks: the costliest, 4 s, is not yet last
    manager.strategy.ask(10)
    rest = handouts._last(5, 0.0)  # x = 8, y = 1 to 5: y = 5 first, dealt to the least busy rank
    assert rest is not None and rest[0] == 39 and sorted(rest) == [35, 36, 37, 38, 39]
    (tmp_path / "uniform").mkdir()
    uniform = Handouts(Ranks(tmp_path / "uniform", 8, strategy="brute_force", schedule="refill").open())
    assert uniform.manager.costs is not None
    uniform.manager.costs.learn_values(ids, [0.5] * 40)
    uniform.manager.strategy.ask(37)
    assert uniform._last(3, 0.0) is None  # few left, all alike: each still goes to a rank as it runs out


def test_a_refilled_chunk_holds_as_many_seconds_not_configurations(tmp_path):
    """Consecutive configurations cost alike: a chunk of costly ones would keep one rank long after
    the others. So a refilled chunk holds what its share of seconds allows, one at least."""
    handouts = Handouts(Ranks(tmp_path, 8, strategy="brute_force", schedule="refill").open())
    manager = handouts.manager
    assert manager.costs is not None
    ids = list(range(40))
    manager.costs.learn_values(ids, [4.0 if i % 5 == 4 else 0.5 for i in ids])
    handouts.config_s.extend([0.5] * 8)
    assert handouts._size(40, 1) == (2, 3)  # 3 by count; 1.25 s a rank by seconds: 2 of 0.5 s
    manager.strategy.ask(4)  # the next is id 4, of 4 s
    assert handouts._size(36, 1) == (1, 3)
