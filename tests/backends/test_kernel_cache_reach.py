"""How far the kernel cache reaches, read from the mount table: the type of the file system that
holds a folder, as util-linux's findmnt names it, and off / node / shared from that."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from mpitune.backends.kernel_cache_reach import LOAD_S, Reach, cache_reach, file_system


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="needs util-linux's findmnt")
def test_the_file_system_of_a_folder_is_findmnts(tmp_path):
    for path in (tmp_path, "/proc/self", "/"):
        found = subprocess.run(
            ["findmnt", "-n", "-o", "FSTYPE", "--target", str(path)], capture_output=True, text=True, check=True
        )
        assert file_system(str(path)) == found.stdout.strip()
    # A folder not made yet is where its nearest existing parent is.
    assert file_system(str(tmp_path / "not" / "yet")) == file_system(str(tmp_path))


def mounts(tmp_path, *lines: str) -> str:
    table = tmp_path / "mounts"
    table.write_text("".join(f"{line}\n" for line in lines))
    return str(table)


def test_a_folder_on_a_network_file_system_reaches_every_node(tmp_path):
    home = tmp_path / "my home"  # a space, which the table writes as \040
    home.mkdir()  # a mount point is a folder; the cache folder in it need not be made yet
    escaped = str(home).replace(" ", "\\040")
    table = mounts(tmp_path, "/dev/sda1 / ext4 rw 0 0", f"server:/home {escaped} nfs4 rw,relatime 0 0")
    folder = str(home / ".cache" / "mpitune" / "kernels")
    found = cache_reach({"MPITUNE_KERNEL_CACHE": folder}, table)
    assert found.reach is Reach.SHARED and found.why == f"the kernel cache {folder} is on nfs4, which the nodes share"
    # The longest mount point wins: a local disk mounted inside the network one is the node's own.
    (home / ".cache").mkdir()
    table = mounts(
        tmp_path,
        "/dev/sda1 / ext4 rw 0 0",
        f"server:/home {escaped} nfs4 rw 0 0",
        f"/dev/sdb {escaped}/.cache xfs rw 0 0",
    )
    assert cache_reach({"MPITUNE_KERNEL_CACHE": folder}, table).reach is Reach.NODE
    assert cache_reach({"MPITUNE_KERNEL_CACHE": "off"}, table).reach is Reach.OFF
    # The default folder follows HOME, as the runs' does.
    table = mounts(tmp_path, "/dev/sda1 / ext4 rw 0 0", f"server:/home {escaped} lustre rw 0 0")
    assert cache_reach({"HOME": str(home)}, table).reach is Reach.SHARED
    # No table to read: the node's own, said so.
    found = cache_reach({"MPITUNE_KERNEL_CACHE": folder}, str(tmp_path / "no-such-table"))
    assert found.reach is Reach.NODE and "on a file system of this node" in found.why
    assert 0 < LOAD_S < 0.05  # a load, not a compile
