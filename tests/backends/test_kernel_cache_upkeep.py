"""The kernel cache kept within its bound: the least recently used entries go, the temporary files
of killed writers go once stale, and processes evicting at once in one folder all go on.

Entries are written and read with the cache's own ``store`` and ``load`` (byte images, no
compiler); "last used" is an mtime, set here with os.utime rather than waited for."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import mpi_env

from mpitune.backends import kernel_cache_upkeep
from mpitune.backends.kernel_cache import Image, KernelCache, decode

MIB = 1 << 20


def digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def image(name: str, size_bytes: int) -> Image:
    """An image of ``size_bytes`` that says whose it is."""
    return Image((digest(name).encode() * (size_bytes // 64 + 1))[:size_bytes], f"entry_{name}")


def entries(folder: Path) -> dict[str, int]:
    """The entries of the cache, each with its size."""
    return {p.stem: p.stat().st_size for p in folder.rglob("*.kernel")}


def test_the_entries_keep_within_the_bound_as_they_are_written(tmp_path):
    folder = tmp_path / "kernels"
    cache = KernelCache(str(folder), bound_bytes=MIB)
    for i in range(30):
        cache.store(digest(str(i)), image(str(i), 100_000))
        assert sum(entries(folder).values()) <= MIB, f"after write {i}"
    kept = entries(folder)
    assert 5 <= len(kept) < 30  # some went, and not everything
    assert digest("29") in kept  # the one just written is the most recently used


def test_no_bound_keeps_every_entry(tmp_path):
    folder = tmp_path / "kernels"
    cache = KernelCache(str(folder), bound_bytes=0)
    for i in range(15):
        cache.store(digest(str(i)), image(str(i), 100_000))
    assert len(entries(folder)) == 15  # 1.4 MiB: past any bound of the other tests


def test_the_most_recently_loaded_entry_stays_while_the_oldest_go(tmp_path):
    """Five entries of 200 kB (under 1 MiB), the oldest then loaded; a sixth takes them past
    1 MiB, and eviction down to 90 % of it takes the two least recently used: the second and
    third written, not the first, which its load made the newest."""
    folder = tmp_path / "kernels"
    cache = KernelCache(str(folder), bound_bytes=MIB)
    names = [str(i) for i in range(6)]
    now_s = time.time()
    for order, name in enumerate(names[:5]):
        cache.store(digest(name), image(name, 200_000))
        old_s = now_s - 10_000 + 1_000 * order  # written in that order, long ago
        os.utime(cache.path(digest(name)), (old_s, old_s))
    assert len(entries(folder)) == 5

    assert cache.load(digest("0")) == image("0", 200_000)
    assert os.stat(cache.path(digest("0"))).st_mtime > now_s - 1_000  # touched: the newest of the five
    cache.store(digest("5"), image("5", 200_000))

    kept = entries(folder)
    assert set(kept) == {digest(name) for name in ("0", "3", "4", "5")}
    assert sum(kept.values()) <= 0.9 * MIB
    assert cache.load(digest("1")) is None  # a reader whose entry went compiles again


KILLED_WRITER = """
import os, sys
from mpitune.backends.kernel_cache import Image, KernelCache

os.replace = lambda *args: os._exit(9)  # killed between writing the entry and renaming it
KernelCache(sys.argv[1]).store(sys.argv[2], Image(b"image" * 1000))
"""


def test_a_killed_writers_temporary_file_goes_once_stale_and_a_fresh_one_stays(tmp_path):
    folder = tmp_path / "kernels"
    script = tmp_path / "killed.py"
    script.write_text(KILLED_WRITER)
    for name in ("stale", "fresh"):
        proc = subprocess.run([sys.executable, str(script), str(folder), digest(name)], env=mpi_env(), timeout=60)
        assert proc.returncode == 9
    temps = {path.name[1:17]: path for path in folder.rglob("*.tmp")}
    assert set(temps) == {digest("stale")[:16], digest("fresh")[:16]} and not entries(folder)
    stale_s = time.time() - kernel_cache_upkeep.STALE_TEMP_S - 600
    os.utime(temps[digest("stale")[:16]], (stale_s, stale_s))
    fresh_s = time.time() - kernel_cache_upkeep.STALE_TEMP_S / 2  # its writer may be renaming it still
    os.utime(temps[digest("fresh")[:16]], (fresh_s, fresh_s))

    KernelCache(str(folder)).store(digest("next"), image("next", 1_000))  # this process's first write: a scan

    assert not temps[digest("stale")[:16]].exists()
    assert temps[digest("fresh")[:16]].exists()
    assert set(entries(folder)) == {digest("next")}


RACING = """
import hashlib, random, sys, time
from pathlib import Path
from mpitune.backends.kernel_cache import Image, KernelCache

folder, me, writes = sys.argv[1], int(sys.argv[2]), 200
cache = KernelCache(folder, bound_bytes=1 << 20)
ready = Path(folder).parent / f"ready{me}"
ready.touch()
deadline = time.monotonic() + 60  # all three start writing at once, however late each started
while not all((ready.parent / f"ready{i}").exists() for i in range(3)) and time.monotonic() < deadline:
    time.sleep(0.001)

def named(name):
    key = hashlib.sha256(name.encode()).hexdigest()
    return key, Image((key.encode() * 1600)[:100_000], "entry_" + name)

bad = lost = 0
for i in range(writes):
    cache.store(*named(f"{me}-{i}"))
    key, expected = named(f"{random.randrange(3)}-{random.randrange(i + 1)}")
    got = cache.load(key)
    lost += got is None
    bad += got is not None and got != expected
print(bad, lost)
"""


def test_processes_evicting_in_one_folder_at_once_all_go_on_and_leave_whole_entries(tmp_path):
    """Three processes write 200 entries of 100 kB each under a bound of 1 MiB, so that each scans
    and removes every few writes while the others do, and each loads entries at random: files
    vanish under their scans and removals, and none of them fails or loads a bad image."""
    folder = tmp_path / "kernels"
    script = tmp_path / "racing.py"
    script.write_text(RACING)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(folder), str(me)],
            env=mpi_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert all(not err for _, err in outs), [err for _, err in outs]
    bad = [int(out.split()[0]) for out, _ in outs]
    assert bad == [0, 0, 0]
    assert kernel_cache_upkeep.upkeep(str(folder), MIB) <= MIB
    kept = list(folder.rglob("*.kernel"))
    assert 0 < len(kept) < 600
    for path in kept:
        decode(path.stem, path.read_bytes())  # whole: raises BadEntry otherwise
