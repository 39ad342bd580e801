"""A stopped run resumed: the strategy is rebuilt from the asks and tells the file records, and
continues exactly where an uninterrupted run with the same seed and batch size would be; no
file can make a resume run code (an old file's pickled strategy state is never loaded)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import mpitune
from test_manager import Ranks, write_measured

from mpitune.model.prior import Prior, PriorSource
from mpitune.model.problem import RunSettings
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import StopReason
from mpitune.scheduling.resume import strategy_key
from mpitune.store.history import search_digest

# Not simulated_annealing: it depends on the order results are told, which depends on how a batch is
# dealt to ranks, which depends on the batch's number within its run; the pickled resume differed too.
STRATEGIES = ["genetic_algorithm", "random_sample", "pso", "differential_evolution", "greedy_ils", "brute_force"]


def stopped_after(ranks: Ranks, rounds: int) -> StopReason:
    """Run until ``rounds`` batches are recorded, then stop as a signal would: from outside,
    before the next batch is handed out. A signal stops each rank before its next configuration,
    so the batch in flight is whole only where each rank's chunk is one configuration (a batch
    of two on two ranks), which a stop keeps whole."""
    manager = ranks.open()

    def signal(m: Manager) -> None:
        m.stop_requested = StopReason.SIGNAL

    # Gathering batch ``rounds`` - 1, the batch after it is already out (two are in flight), and
    # the one after that is the fill that finds the stop.
    ranks.before_gather[rounds] = signal
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
