"""A stopped run resumed: the strategy is rebuilt from the asks and tells the file records, and
continues exactly where an uninterrupted run with the same seed and batch size would be; no
file can make a resume run code (an old file's pickled strategy state is never loaded)."""

from __future__ import annotations

import json
import logging
import pickle
import random
import shutil
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import IDENTITY, info, mpitune
from test_manager import Ranks, write_measured

from mpitune import strategies
from mpitune.model.prior import Prior, PriorSource
from mpitune.model.problem import RunSettings
from mpitune.model.result import Result, Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import StopReason
from mpitune.scheduling.resume import Held, rebuild, strategy_key
from mpitune.store.cache import Cache
from mpitune.store.history import search_digest
from mpitune.strategies.base import Strategy

# Simulated annealing and differential evolution depend on the order results are told within a
# batch, which would depend on how the batch was dealt to ranks (a resumed run deals otherwise),
# were a batch not told in one call in the order it was asked (handouts.py).
STRATEGIES = [
    "genetic_algorithm",
    "random_sample",
    "pso",
    "differential_evolution",
    "greedy_ils",
    "brute_force",
    "simulated_annealing",
]


def stopped_after(ranks: Ranks, rounds: int) -> StopReason:
    """Run until ``rounds`` batches are recorded, then stop as a signal would: from outside,
    before the next batch is handed out. A signal stops each rank before its next configuration,
    so the batch in flight is whole only where each rank's chunk is one configuration (a batch
    of two on two ranks), which a stop keeps whole."""
    manager = ranks.open()

    def signal(m: Manager) -> None:
        m.request_stop(StopReason.SIGNAL)

    # Recording batch ``rounds`` - 1 (its first report), the batch after it is already out (two
    # are in flight), and the next hand-out finds the stop.
    ranks.before_record[2 * (rounds - 1) + 1] = signal
    return ranks.run(manager)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_stopped_and_resumed_search_asks_what_an_uninterrupted_one_asks(tmp_path, strategy):
    options = dict(strategy=strategy, seed=5, batch_size=2)
    (tmp_path / "whole").mkdir(), (tmp_path / "split").mkdir()
    whole = Ranks(tmp_path / "whole", 2, **options)
    assert whole.run(whole.open()) is StopReason.FINISHED
    first = Ranks(tmp_path / "split", 2, **options)
    assert stopped_after(first, 3) is StopReason.SIGNAL
    second = Ranks(tmp_path / "split", 2, **options)
    assert second.run(second.open()) is StopReason.FINISHED
    # The same ids batch by batch (a resumed run numbers its batches from 0, so ranks get other chunks).
    assert [sorted(b) for b in first.batches + second.batches] == [sorted(b) for b in whole.batches]


def test_a_history_that_does_not_replay_starts_the_strategy_afresh(tmp_path, caplog):
    first = Ranks(tmp_path, 2, strategy="genetic_algorithm", seed=5, batch_size=2)
    assert stopped_after(first, 2) is StopReason.SIGNAL
    with h5py.File(first.cache_path, "a") as f:  # the file says batch 0 asked otherwise
        row = f["asked"][0]
        row["config_id"] = 39 - int(row["config_id"])
        f["asked"][0] = row
    second = Ranks(tmp_path, 2, strategy="genetic_algorithm", seed=5, batch_size=2)
    assert second.run(second.open()) is StopReason.FINISHED
    assert "the recorded search does not replay" in caplog.text
    assert sorted(i for b in first.batches + second.batches for i in b) == list(range(40))


def test_a_file_written_before_the_told_table_resumes_by_the_batch_rule_as_before(tmp_path):
    options = dict(strategy="genetic_algorithm", seed=5, batch_size=2)
    (tmp_path / "whole").mkdir(), (tmp_path / "split").mkdir()
    whole = Ranks(tmp_path / "whole", 2, **options)
    assert whole.run(whole.open()) is StopReason.FINISHED
    first = Ranks(tmp_path / "split", 2, **options)
    assert stopped_after(first, 3) is StopReason.SIGNAL
    with h5py.File(first.cache_path, "a") as f:  # as an mpitune of schema version 4 left it
        del f["told"]  # what was told before each ask: the batch rule says it
        f.attrs["schema_version"] = 4
    second = Ranks(tmp_path / "split", 2, **options)
    assert second.run(second.open()) is StopReason.FINISHED
    assert [sorted(b) for b in first.batches + second.batches] == [sorted(b) for b in whole.batches]


# A search that hands out work whenever ranks want it: each report is told as it arrives, in an
# order timing decides, and each ask records how many of the run's rows were told before it.
TOLD_PARAMS = {"x": list(range(1, 9)), "y": list(range(1, 6))}  # 40 configurations
TOLD_IDENTITY = replace(IDENTITY, tune_params={k: tuple(v) for k, v in TOLD_PARAMS.items()})
TOLD_RANKS = 3


class Refill:
    """A run of ``TOLD_RANKS`` ranks written as rank 0 writes it. Each step, as timing (a seeded
    random) has it: either the ranks that want work (one or two, or every rank when none is
    busy) get one ask, of one or two ids each, dealt among them; or a busy rank reports, and its
    rows are told in one call and appended."""

    def __init__(self, path: str, strategy: Strategy, space: SearchSpace, seed: int):
        self.cache = Cache(path, TOLD_IDENTITY, TOLD_PARAMS, iterations=3)
        self.cache.start_run(info(ranks=TOLD_RANKS), ["h"] * TOLD_RANKS, ["d"] * TOLD_RANKS, [1] * TOLD_RANKS)
        self.strategy, self.space, self.rng = strategy, space, random.Random(seed)
        self.idle, self.out, self.told, self.batch = list(range(TOLD_RANKS)), [], 0, -1

    def step(self) -> None:
        if len(self.idle) >= self.rng.choice((1, 2)) or not self.out:
            requested = len(self.idle) + self.rng.randrange(len(self.idle) + 1)
            ids = self.strategy.ask(requested)
            self.batch += 1
            chunks: list[list[int]] = [[] for _ in range(TOLD_RANKS)]
            for i, rank in enumerate(self.idle):
                chunks[rank] = ids[i :: len(self.idle)]
                self.out.append((self.batch, rank, chunks[rank]))
            self.cache.hand_out(self.batch, chunks, requested, ids, told=self.told)
            self.idle = []
        else:
            self.report(self.out[self.rng.randrange(len(self.out))])

    def report(self, chunk: tuple[int, int, list[int]]) -> None:
        self.out.remove(chunk)
        batch, rank, ids = chunk
        scored = [self.measured(i, batch, rank) for i in ids]
        self.strategy.tell(scored)
        self.cache.append(scored, [])
        self.told += len(scored)
        self.idle.append(rank)

    def measured(self, config_id: int, batch: int, rank: int) -> Scored:
        config = self.space.config(config_id)
        t = 100.0 / (config["x"] * config["y"])
        return self.cache.objective.evaluate(
            Result(config_id, "ok", time_ms=t, times_ms=(t,) * 3, rank=rank, batch=batch), config
        )

    def end(self, key: str) -> None:
        """The run ends cleanly: what is out comes back and is told, and the search is continuable."""
        while self.out:
            self.report(self.out[0])
        self.cache.end_search(key, continuable=True)
        self.cache.finish_run(1.0, "finished", self.told)


def rebuilt(path: str, name: str, space: SearchSpace, key: str) -> tuple[Strategy, Held]:
    """The strategy a resumed run on ``path`` starts with, rebuilt as the Manager rebuilds it."""
    cache = Cache(path, TOLD_IDENTITY, TOLD_PARAMS, iterations=3)
    known = [cache.objective.evaluate(r, space.config(r.config_id)) for r in cache.recorded()]
    history = cache.history()
    cache.close()
    return rebuild(lambda: strategies.create(name, space, 5, {}, None), history, known, key, name)


def told_search(tmp_path: Path, name: str, steps: int) -> tuple[SearchSpace, str, str, Refill]:
    """A search of ``name`` that told reports as they came, ``steps`` long, recorded and ended
    cleanly in a file: its space, search key, file and run."""
    space = SearchSpace.build(TOLD_PARAMS)
    key = strategy_key(RunSettings(strategy=name, seed=5), ["time", False], None)
    path = str(tmp_path / "c.h5")
    run = Refill(path, strategies.create(name, space, 5, {}, None), space, seed=3)
    for _ in range(steps):
        run.step()
    run.end(key)
    run.cache.close()
    return space, key, path, run


def test_a_search_that_told_reports_as_they_came_resumes_asking_what_it_would_have_asked(tmp_path, caplog):
    """portfolio's model learns from every report as it is told, so its asks depend on what it
    knew when asked: replayed by the batch rule, the same file does not replay."""
    space, key, path, run = told_search(tmp_path, "portfolio", 24)
    with h5py.File(path, "r") as f:
        told = f["told"]["rows"].tolist()
    assert len(told) >= 5 and len(set(np.diff(told))) > 1  # asks between reports, as they came
    without = str(tmp_path / "without.h5")
    shutil.copy(path, without)
    with h5py.File(without, "a") as f:
        del f["told"]
    rebuilt(without, "portfolio", space, key)
    assert "the recorded search does not replay" in caplog.text  # the counts are what replays it
    caplog.clear()
    caplog.set_level(logging.INFO)
    strategy, held = rebuilt(path, "portfolio", space, key)
    assert "does not replay" not in caplog.text
    assert f"({len(told)} recorded asks replayed)" in caplog.text
    for hand_out in held:  # what the run told after its last ask: a refilled run tells it at once
        for report in hand_out:
            strategy.tell(report)
    for _ in range(2):  # the uninterrupted search and the rebuilt one go on alike
        ids = run.strategy.ask(4)
        assert strategy.ask(4) == ids
        scored = [run.measured(i, 0, 0) for i in ids]
        run.strategy.tell(scored), strategy.tell(scored)


@pytest.mark.parametrize("damage", ["an answer", "a told count"])
def test_a_search_that_told_reports_as_they_came_and_does_not_replay_starts_afresh(tmp_path, damage, caplog):
    space, key, path, run = told_search(tmp_path, "genetic_algorithm", 10)
    with h5py.File(path, "a") as f:
        if damage == "an answer":  # the file says batch 0 asked otherwise
            row = f["asked"][0]
            row["config_id"] = 39 - int(row["config_id"])
            f["asked"][0] = row
        else:  # the first ask's count lost: its run says what was told before some asks only
            f["told"][0 : len(f["told"]) - 1] = f["told"][1:]
            f["told"].resize((len(f["told"]) - 1,))
    strategy, held = rebuilt(path, "genetic_algorithm", space, key)
    assert "the recorded search does not replay" in caplog.text
    assert held == [] and strategy.seen == set(run.strategy.seen)  # afresh, told everything the file holds


class Planted:
    """A pickle that creates a file when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def plant_pickle(path: str, key: str, marker: Path) -> None:
    """Turn a file into what an older mpitune wrote, with a crafted strategy state under the right key."""
    payload = pickle.dumps(Planted(marker))
    with h5py.File(path, "a") as f:
        for name in ("strategy_state", "strategy_key"):
            if name in f:
                del f[name]
        f.create_dataset("strategy_state", data=list(payload), dtype="u1", maxshape=(None,), chunks=(1 << 16,))
        f.create_dataset("strategy_key", data=[search_digest(key).encode()], dtype="S64")
    with open(path, "rb"):
        assert not marker.exists()
    pickle.loads(payload)  # the payload is real: unpickled, it makes the marker
    assert marker.exists()
    marker.unlink()


def test_an_old_files_pickled_strategy_is_never_loaded_on_resume(tmp_path, caplog):
    first = Ranks(tmp_path, 2, strategy="genetic_algorithm", seed=5, batch_size=2)
    assert stopped_after(first, 2) is StopReason.SIGNAL
    marker = tmp_path / "pwned"
    key = json.dumps(["genetic_algorithm", 5, {}, "time", False], sort_keys=True, default=str)
    plant_pickle(first.cache_path, key, marker)
    second = Ranks(tmp_path, 2, strategy="genetic_algorithm", seed=5, batch_size=2)
    assert second.run(second.open()) is StopReason.FINISHED
    assert not marker.exists()


def test_replay_output_onto_a_crafted_file_runs_no_code(tmp_path):
    source = str(write_measured(tmp_path / "kt.json"))
    out = tmp_path / "out.h5"
    proc = mpitune(
        1,
        ["replay", source, "--output", str(out), "--strategy", "brute_force", "--max-fevals", "8", "--seed", "1"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    marker = tmp_path / "pwned"
    key = json.dumps(["brute_force", 1, {}, "time", False], sort_keys=True, default=str)
    plant_pickle(str(out), key, marker)
    proc = mpitune(1, ["replay", source, "--output", str(out), "--strategy", "brute_force", "--seed", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()


def test_the_search_key_holds_the_priors_digests_and_is_unchanged_without_a_prior():
    settings = RunSettings(strategy="portfolio", seed=3, strategy_options={"model_share": 1.0})
    objective = ["time", False]
    # As files written before priors existed record it: their searches still resume.
    before = json.dumps(["portfolio", 3, {"model_share": 1.0}, "time", False], sort_keys=True)
    assert strategy_key(settings, objective, None) == before

    def prior(digest: str) -> Prior:
        source = PriorSource("p.json", "k", "GPU", "[1]", ("x",), 1, digest)
        return Prior((source,), (np.zeros(1),))

    keys = {strategy_key(settings, objective, prior(d)) for d in ("a" * 64, "b" * 64)}
    assert len(keys) == 2 and before not in keys
