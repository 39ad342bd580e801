"""One writer per file, whatever the path: a second run through a symbolic or hard link is refused,
no lock file is left beside the cache, and readers still see a live writer."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import IDENTITY, PARAMS, mpi_env

from mpitune.errors import UserError
from mpitune.store.cache import Cache
from mpitune.store.lock import writer_alive


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_a_second_writer_through_a_link_is_refused_with_one_line(tmp_path, link):
    path = tmp_path / "c.h5"
    cache = Cache(str(path), IDENTITY, PARAMS, iterations=3)
    alias = tmp_path / "alias.h5"
    link(path, alias)
    with pytest.raises(UserError) as refused:
        Cache(str(alias), IDENTITY, PARAMS, iterations=3)
    assert "another mpitune run is writing" in str(refused.value) and "\n" not in str(refused.value)
    assert writer_alive(str(path)) and writer_alive(str(alias))
    cache.close()
    assert not writer_alive(str(path))
    Cache(str(alias), IDENTITY, PARAMS, iterations=3).close()  # free again, under any name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias.h5", "c.h5"]  # no lock or partial files


def test_a_writer_in_another_process_is_seen_and_readers_still_work(tmp_path):
    path = tmp_path / "c.h5"
    Cache(str(path), IDENTITY, PARAMS, iterations=3).close()
    code = (
        "import sys, time; sys.path[:0] = [{repo!r}, {tests!r}]\n"
        "from mpitune.store.cache import Cache\nfrom conftest import IDENTITY, PARAMS\n"
        "c = Cache({path!r}, IDENTITY, PARAMS, iterations=3)\nprint('open', flush=True)\ntime.sleep(30)\n"
    )
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    writer = subprocess.Popen(
        [sys.executable, "-c", code.format(repo=os.path.dirname(tests), tests=tests, path=str(path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline() == "open\n"
        os.link(path, tmp_path / "hard.h5")
        assert writer_alive(str(tmp_path / "hard.h5"))
        report = subprocess.run(
            [sys.executable, "-m", "mpitune", "report", str(tmp_path / "hard.h5"), "--json"],
            capture_output=True,
            text=True,
            env=mpi_env(),
            timeout=60,
        )
        assert report.returncode == 0, report.stderr
        with pytest.raises(UserError):
            Cache(str(tmp_path / "hard.h5"), IDENTITY, PARAMS, iterations=3)
    finally:
        writer.kill()
        writer.wait()
    assert not writer_alive(str(path))
