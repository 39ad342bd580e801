"""verify: a file found sound is not read back again while it is unchanged, and is once it changes."""

from __future__ import annotations

import os

import pytest
from conftest import IDENTITY, PARAMS, info
from records import append

from mpitune.model.result import Result
from mpitune.store.cache import Cache
from mpitune.store.integrity import DamagedFileError, verify


def test_a_file_that_changed_after_it_was_found_sound_is_examined_again(tmp_path):
    path = str(tmp_path / "c.h5")
    cache = Cache(path, IDENTITY, PARAMS, iterations=3)
    cache.start_run(info(), ["h"], ["d"], [1])
    append(cache, [Result(0, "ok", time_ms=1.0, times_ms=[1.0], rank=0)], [{"bs": 32, "kind": "a", "f": 0.5}], [])
    cache.close()
    verify(path)
    verify(path)  # unchanged: answered from what this process already found
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) * 2 // 3)
    with pytest.raises(DamagedFileError, match="is damaged"):
        verify(path)
