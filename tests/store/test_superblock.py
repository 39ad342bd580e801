import struct

import h5py
import pytest

from mpitune.store.superblock import clear_write_flags, lookup3


def test_lookup3_matches_the_checksum_hdf5_wrote(tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=[1, 2, 3])
    head = path.read_bytes()[:48]
    assert head[8] in (2, 3)
    assert struct.unpack("<I", head[44:48])[0] == lookup3(head[:44])


def test_lookup3_reference_values():
    # From Bob Jenkins' lookup3.c driver: hashlittle("", 0) and "Four score and seven years ago".
    assert lookup3(b"", 0) == 0xDEADBEEF
    assert lookup3(b"Four score and seven years ago", 0) == 0x17770551
    assert lookup3(b"Four score and seven years ago", 1) == 0xCD628161


def test_clearing_flags_of_a_clean_file_changes_nothing(tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=[1])
    before = path.read_bytes()
    assert clear_write_flags(str(path)) is False
    assert path.read_bytes() == before


def test_not_hdf5_is_refused(tmp_path):
    path = tmp_path / "x.h5"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match="not an HDF5 file"):
        clear_write_flags(str(path))


def test_is_hdf5_agrees_with_h5py(tmp_path):
    from mpitune.store.superblock import is_hdf5

    good = tmp_path / "a.h5"
    with h5py.File(good, "w") as f:
        f.create_dataset("x", data=[1])
    with_userblock = tmp_path / "b.h5"
    with h5py.File(with_userblock, "w", userblock_size=1024) as f:
        f.create_dataset("x", data=[1])
    text = tmp_path / "c.h5"
    text.write_text("not hdf5" * 200)
    empty = tmp_path / "d.h5"
    empty.write_bytes(b"")
    for path in (good, with_userblock, text, empty):
        assert is_hdf5(str(path)) == h5py.is_hdf5(str(path)), path
