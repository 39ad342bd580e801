"""The one way mpitune writes a file (mpitune/store/files.py): never over an input, never through
a link, whole or not at all, under a temporary name that fits whatever the output's name."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import pytest

from mpitune.errors import UserError
from mpitune.store.files import (
    TEMPORARY_PREFIX,
    TEMPORARY_SUFFIX,
    claim_temporary,
    create_exclusive,
    create_hdf5,
    refuse_inputs,
    written_whole,
)


def longest_name(folder: Path, suffix: str) -> Path:
    """A file name of the longest length the folder's file system allows (NAME_MAX, usually 255)."""
    name_max = os.pathconf(folder, "PC_NAME_MAX")
    return folder / ("n" * (name_max - len(suffix)) + suffix)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(TEMPORARY_PREFIX))


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file that a planted link points at: it must never change."""
    target = tmp_path / "victim"
    target.write_bytes(b"not yours to write")
    return target


@pytest.mark.parametrize("create", [create_exclusive, create_hdf5])
def test_the_temporary_file_is_never_made_through_a_link(tmp_path, victim, create):
    planted, dangling = tmp_path / "planted", tmp_path / "dangling"
    planted.symlink_to(victim)
    dangling.symlink_to(tmp_path / "nowhere")
    for link in (planted, dangling):
        with pytest.raises(FileExistsError):
            create(str(link))
    assert victim.read_bytes() == b"not yours to write"
    assert not (tmp_path / "nowhere").exists()  # a dangling link is not followed to create its target


def test_a_name_taken_by_a_planted_link_is_passed_over(tmp_path, victim):
    """Whoever plants a link at the very name drawn, between the draw and the create, gains nothing:
    the create fails on it and the next random name is drawn."""
    drawn: list[str] = []

    def planted_first(path: str) -> int:
        if not drawn:
            os.symlink(victim, path)
        drawn.append(path)
        return create_exclusive(path)

    temporary, fd = claim_temporary(str(tmp_path / "out.json"), planted_first)
    os.write(fd, b"written")
    os.close(fd)
    assert len(drawn) == 2 and temporary == drawn[1]
    assert Path(drawn[0]).is_symlink() and victim.read_bytes() == b"not yours to write"
    assert Path(temporary).read_bytes() == b"written"


@pytest.mark.parametrize("suffix", [".json", ".h5"])
def test_the_temporary_name_is_short_hidden_and_beside_an_output_of_the_longest_name(tmp_path, suffix):
    out = longest_name(tmp_path, suffix)
    if suffix == ".h5":
        temporary, new = claim_temporary(str(out), create_hdf5)
        new.close()
    else:
        temporary, fd = claim_temporary(str(out), create_exclusive)
        os.close(fd)
    name = os.path.basename(temporary)
    assert os.path.dirname(temporary) == str(tmp_path)  # same folder: the rename is atomic
    assert name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX) and len(name) == 29
    with written_whole(str(out)) as fh:
        fh.write(b"whole")
    assert out.read_bytes() == b"whole" and len(out.name) == os.pathconf(tmp_path, "PC_NAME_MAX")


def test_an_output_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out.json"
    out.write_bytes(b"older")
    with pytest.raises(ValueError), written_whole(str(out)) as fh:
        fh.write(b"half")
        raise ValueError("a bad value halfway")
    assert out.read_bytes() == b"older" and temporaries(tmp_path) == []
    with written_whole(str(out)) as fh:
        fh.write(b"newer")
    assert out.read_bytes() == b"newer" and temporaries(tmp_path) == []
    assert (out.stat().st_mode & 0o777) == 0o666 & ~_umask()  # as open() would have made it


def test_a_link_at_the_output_itself_is_replaced_not_followed(tmp_path, victim):
    out = tmp_path / "out.json"
    out.symlink_to(victim)
    with written_whole(str(out)) as fh:
        fh.write(b"output")
    assert not out.is_symlink() and out.read_bytes() == b"output"
    assert victim.read_bytes() == b"not yours to write"


def test_the_input_is_refused_under_every_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File("x.h5", "w"):
        pass
    (tmp_path / "sub").mkdir()
    os.link("x.h5", "hard.h5")
    os.symlink("x.h5", "soft.h5")
    for out in ("x.h5", "./x.h5", "sub/../x.h5", str(tmp_path / "x.h5"), "hard.h5", "soft.h5"):
        with pytest.raises(UserError, match=f"^{out} is the input x.h5; write the output to another file$"):
            refuse_inputs(out, "", "other.json", "x.h5")
    os.symlink("nowhere", "dangling.h5")
    for out in ("new.h5", "dangling.h5", "sub"):
        refuse_inputs(out, "x.h5")  # nothing there yet, or another file: nothing to lose


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
