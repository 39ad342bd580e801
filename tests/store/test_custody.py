"""The results file under foreign hands, in the writer itself: a real file removed, replaced,
truncated or moved away while a ``Cache`` writes it. The next write finds out, writes what was
written (and the batch it was writing) to a new file beside the path and goes on there, and
``lost`` says so; nothing that was there is overwritten."""

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


def _rescued(cache: Cache, path: Path, results: int) -> Path:
    """The file beside ``path`` that ``cache.lost`` names, holding ``results`` rows by its count."""
    assert cache.lost is not None
    found = re.search(rf"everything it recorded \({results} results\) is kept in (\S+):", str(cache.lost))
    assert found, str(cache.lost)
    rescued = Path(found.group(1))
    assert rescued.parent == path.parent and rescued.name.startswith(f"{path.name}.rescued-")
    return rescued


@pytest.mark.parametrize(
    ("act", "words"),
    [(_remove, "was removed"), (_replace, "was replaced by another file"), (_truncate, "was truncated")],
)
def test_the_next_write_goes_on_in_a_new_file_beside_the_path_with_every_row(tmp_path, act, words):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    _hand_out(cache, 2)
    act(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    _record(cache, 2)  # the batch being recorded when the loss is found is kept with the rest
    assert re.match(rf"{re.escape(f'{path} {words}')}( \(from \d+ to 0 bytes\))? while this run", str(cache.lost))
    rescued = _rescued(cache, path, 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, rescued.name])  # nothing else
    _batch(cache, 3)  # written there from now on
    cache.finish_run(3.0, "file_lost", 8)
    cache.close()
    data = read(str(rescued))
    assert sorted(data.results["config_id"]) == list(range(8))
    assert list(data.runs["status"]) == ["file_lost"] and len(data.timeline) == 4
    assert examine(str(rescued)).problems == []
    assert "(8 results)" in str(cache.lost)
    if act is not _remove:  # what took the path's place is left as it was
        assert path.read_bytes() == (b"another file" if act is _replace else b"")


def test_a_rescued_file_resumes_as_after_a_killed_run(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    _hand_out(cache, 2)
    _remove(path)
    cache.close()  # the run's row still says "running", and batch 2 is in flight
    rescued = _rescued(cache, path, 4)
    resumed = Cache(str(rescued), IDENTITY, PARAMS, iterations=3)
    assert [r.config_id for r in resumed.recorded()] == [0, 1, 2, 3]
    assert resumed.interrupted == "batch 2 of run 0 was in flight: rank 0 held 4; rank 1 held 5"
    assert resumed.start_run(info(), ["h"], ["d"], [1]) == 1
    resumed.close()


def test_a_file_moved_away_is_left_whole_and_the_rows_go_on_beside_the_path(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    moved = tmp_path / "moved.h5"
    os.rename(path, moved)
    cache.finish_run(3.0, "file_lost", 4)
    assert "c.h5 was moved away" in str(cache.lost)
    rescued = _rescued(cache, path, 4)
    cache.close()
    assert len(read(str(rescued)).results) == 4
    assert len(read(str(moved)).results) == 4  # written to the end, then let go of


def test_closing_a_lost_file_says_so_and_a_taken_name_is_never_overwritten(tmp_path):
    path = tmp_path / "c.h5"
    cache = _writing(path)
    taken = tmp_path / f"c.h5.rescued-{os.getpid()}"
    taken.write_text("an earlier rescue")
    _truncate(path)
    cache.close()
    assert _rescued(cache, path, 4).name == f"{taken.name}-2"
    assert taken.read_text() == "an earlier rescue"


def test_rows_that_cannot_be_kept_beside_the_path_end_the_writer_with_why(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    path = folder / "c.h5"
    cache = _writing(path)
    shutil.rmtree(folder)
    with pytest.raises(CustodyLost, match=r"c.h5 was removed while this run was writing it, and its rows could not"):
        _batch(cache, 2)
    cache.close()  # let go of already


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
    assert cache.lost is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.h5", "c.h5", "copy.h5"]
    assert np.array_equal(np.sort(read(str(path)).results["config_id"]), np.arange(6))
