"""The search's history as the file records it, read back from real files: every ask, with how many
of its run's results rows were told before it where the run recorded that (``told``), and files
written before the ``told`` table, which read and take new asks as before."""

import h5py
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.result import Result
from mpitune.store.cache import Cache
from mpitune.store.history import Ask, read_history
from mpitune.store.integrity import examine
from mpitune.store.reader import read

CONFIG = {"bs": 32, "kind": "a", "f": 0.5}


def report(cache: Cache, batch: int, rank: int, ids: list[int]) -> None:
    """One rank's report of ``ids`` of ``batch``: consecutive rows, as rank 0 appends them."""
    results = [Result(i, "ok", time_ms=1.0 + i, times_ms=[1.0], rank=rank, batch=batch) for i in ids]
    append(cache, results, [CONFIG] * len(ids))


def test_the_asks_read_back_with_the_rows_told_before_each(tmp_path):
    path = str(tmp_path / "c.h5")
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    cache.hand_out(0, [[0, 1], [2]], requested=3, asked=[0, 1, 2], told=0)
    report(cache, 0, 1, [2])
    cache.hand_out(1, [[], [3]], requested=1, asked=[3], told=1)  # rank 1 wanted work again
    report(cache, 1, 1, [3])
    report(cache, 0, 0, [0, 1])
    cache.hand_out(2, [[4], [5]], requested=2, asked=[4, 5], told=4)
    cache.close()
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)  # a second run, by the batch rule
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    cache.hand_out(0, [[6], [7]], requested=2, asked=[6, 7])
    history = cache.history()
    cache.close()
    assert history.asks == [
        Ask(0, 0, 3, (0, 1, 2), 0),
        Ask(0, 1, 1, (3,), 1),
        Ask(0, 2, 2, (4, 5), 4),
        Ask(1, 0, 2, (6, 7), None),
    ]
    assert history.row_ranks.tolist() == [1, 1, 0, 0] and history.row_batches.tolist() == [0, 1, 0, 0]
    with h5py.File(path, "r") as f:
        assert f["told"][...].tolist() == [(0, 0, 0), (0, 1, 1), (0, 2, 4)]  # none for the batch rule's ask
        assert read_history(f).asks == history.asks
    assert not examine(path).problems


def test_a_file_written_before_the_told_table_reads_and_gains_it(tmp_path):
    path = str(tmp_path / "c.h5")
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    cache.hand_out(0, [[0], [1]], requested=2, asked=[0, 1])
    report(cache, 0, 0, [0])
    report(cache, 0, 1, [1])
    cache.finish_run(1.0, "finished", 2)
    cache.close()
    with h5py.File(path, "a") as f:  # as an mpitune of schema version 4 left it
        del f["told"]
        f.attrs["schema_version"] = 4
    with h5py.File(path, "r") as f:
        assert [a.told for a in read_history(f).asks] == [None]
    assert read(path).results["config_id"].tolist() == [0, 1] and not examine(path).problems
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)  # a run on it adds the table, empty
    cache.start_run(info(), ["h0", "h1"], ["d0", "d1"], [10, 11])
    cache.hand_out(0, [[2], [3]], requested=2, asked=[2, 3], told=0)
    assert [a.told for a in cache.history().asks] == [None, 0]
    cache.close()
    with h5py.File(path, "r") as f:
        assert f["told"][...].tolist() == [(1, 0, 0)] and f.attrs["schema_version"] == 4
