"""The results file under foreign hands, in the writer itself: a real file removed, replaced,
truncated or moved away while a ``Cache`` writes it. The next write finds out, writes what was
written (and the batch it was writing) to a new file beside the path, and says so; nothing that
was there is overwritten."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.store.cache import Cache
from mpitune.store.custody import CustodyLost
from mpitune.store.integrity import examine
from mpitune.store.reader import read

CONFIG = {"bs": 32, "kind": "a", "f": 0.5}


def _hand_out(cache: Cache, batch: int) -> None:
    """Batch ``batch``: two configurations, one per rank."""
    cache.hand_out(batch, [[2 * batch], [2 * batch + 1]], 2, [2 * batch, 2 * batch + 1])


def _record(cache: Cache, batch: int) -> None:
    ids = [2 * batch, 2 * batch + 1]
    results = [Result(i, "ok", time_ms=1.0 + i, times_ms=[1.0] * 3, rank=i % 2, batch=batch) for i in ids]
    append(cache, results, [CONFIG] * 2, [(0, PhaseRow(batch, ids[0], "benchmark", 0.0, 1.0))], batch)


def _batch(cache: Cache, batch: int) -> None:
    _hand_out(cache, batch)
    _record(cache, batch)


def _writing(path: Path) -> Cache:
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h0", "h1"], ["d", "d"], [1, 2])
    _batch(cache, 0)
    _batch(cache, 1)
    return cache


def _remove(path: Path) -> None:
    path.unlink()


def _replace(path: Path) -> None:
    other = path.with_name("other.h5")
    other.write_bytes(b"another file")
    os.replace(other, path)


def _truncate(path: Path) -> None:
    with open(path, "w"):
        pass


def _rescued(error: CustodyLost, path: Path) -> Path:
    found = re.search(r"is kept in (\S+):", str(error))
    assert found, str(error)
    rescued = Path(found.group(1))
    assert rescued.parent == path.parent and rescued.name.startswith(f"{path.name}.rescued-")
    return rescued


@pytest.mark.parametrize(
    ("act", "words"),
    [(_remove, "was removed"), (_replace, "was replaced by another file"), (_truncate, "was truncated")],
)
def test_the_next_write_keeps_every_row_beside_the_path_and_says_where(tmp_path, act, words):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    _hand_out(cache, 2)
    act(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CustodyLost) as lost:
        _record(cache, 2)  # the batch being recorded when the loss is found is kept too
    assert re.match(rf"{re.escape(f'{path} {words}')}( \(from \d+ to 0 bytes\))? while this run", str(lost.value))
    assert "everything it recorded (6 results) is kept in" in str(lost.value)
    rescued = _rescued(lost.value, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, rescued.name])  # nothing else
    data = read(str(rescued))
    assert sorted(data.results["config_id"]) == [0, 1, 2, 3, 4, 5]
    assert list(data.runs["status"]) == ["killed"] and len(data.timeline) == 3
    assert examine(str(rescued)).problems == []
    if act is not _remove:  # what took the path's place is left as it was
        assert path.read_bytes() == (b"another file" if act is _replace else b"")


def test_the_rescued_file_resumes_like_a_killed_runs(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    _hand_out(cache, 2)
    _remove(path)
    with pytest.raises(CustodyLost) as lost:
        cache.end_search("key", continuable=True)
    rescued = _rescued(lost.value, path)
    resumed = Cache(str(rescued), IDENTITY, PARAMS, iterations=3)
    assert [r.config_id for r in resumed.recorded()] == [0, 1, 2, 3]
    assert resumed.interrupted == "batch 2 of run 0 was in flight: rank 0 held 4; rank 1 held 5"
    assert resumed.start_run(info(), ["h"], ["d"], [1]) == 1
    resumed.close()


def test_a_file_moved_away_is_left_whole_and_a_copy_made_beside_the_path(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    moved = tmp_path / "moved.h5"
    os.rename(path, moved)
    with pytest.raises(CustodyLost, match="was moved away") as lost:
        cache.finish_run(3.0, "finished", 4)
    assert len(read(str(_rescued(lost.value, path))).results) == 4
    assert len(read(str(moved)).results) == 4  # written to the end, then let go of


def test_closing_a_lost_file_says_so_and_a_taken_name_is_never_overwritten(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    taken = tmp_path / f"c.h5.rescued-{os.getpid()}"
    taken.write_text("an earlier rescue")
    _truncate(path)
    with pytest.raises(CustodyLost) as lost:
        cache.close()
    assert _rescued(lost.value, path).name == f"{taken.name}-2"
    assert taken.read_text() == "an earlier rescue"
    cache.close()  # let go of already: nothing more to do


def test_a_run_left_alone_is_not_disturbed(tmp_path):
    """Readers, a hard link and a copy of the file leave the writer be."""
    path = tmp_path / "c.h5"
    cache = _writing(path)
    os.link(path, tmp_path / "alias.h5")
    shutil.copy(path, tmp_path / "copy.h5")
    with h5py.File(path, "r", swmr=True) as f:
        assert len(f["results"]) == 4
    _batch(cache, 2)
    cache.finish_run(3.0, "finished", 6)
    cache.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.h5", "c.h5", "copy.h5"]
    assert np.array_equal(np.sort(read(str(path)).results["config_id"]), np.arange(6))
