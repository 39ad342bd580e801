"""Class 4: an output that is an input is refused, by any path to it, by every verb that writes;
no link planted beside an output is followed; an output's name may be as long as the system
allows. (That outputs appear whole or not at all is tested on a full disk, in test_disk.py, and
the one helper every file is written through in tests/store/test_files.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import kt_cache, mpi_env

from mpitune.cli import main


def offline(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", *args], cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=60
    )
    return proc, time.monotonic() - started


def one_line(proc: subprocess.CompletedProcess, words: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Every verb that writes a file, in this process (``mpitune.cli.main``), and what it reads: the
# output is the input in five ways, and links planted where outputs and temporary files went.
WAYS = ["same", "relative", "absolute", "hardlink", "symlink"]


@pytest.fixture
def inputs(tmp_path, monkeypatch) -> Path:
    """kt.json and the x.h5 imported from it, in the current folder."""
    monkeypatch.chdir(tmp_path)
    kt_cache(tmp_path / "kt.json")
    assert main(["import", "kt.json", "--out", "x.h5"]) == 0
    return tmp_path


def same_file(folder: Path, source: str, how: str, alias: str) -> str:
    """A path to ``source`` made in way ``how``."""
    if how == "same":
        return source
    if how == "relative":
        (folder / "sub").mkdir(exist_ok=True)
        return f"./sub/../{source}"
    if how == "absolute":
        return str(folder / source)
    (folder / alias).parent.mkdir(exist_ok=True)
    if how == "hardlink":
        os.link(folder / source, folder / alias)
    else:
        os.symlink(folder / source, folder / alias)
    return alias


def refused(capsys, argv: list[str], words: str) -> None:
    code = main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0], lines


def no_temporaries(folder: Path) -> None:
    assert [p for p in folder.rglob(".mpitune-*")] == []


@pytest.mark.parametrize("how", WAYS)
@pytest.mark.parametrize("verb", ["report --html", "plot", "import", "export t4", "export kt-json"])
def test_no_verb_writes_onto_its_input(inputs, capsys, verb, how):
    source = "kt.json" if verb == "import" else "x.h5"
    before = digest(inputs / source)
    out = same_file(inputs, source, how, "plots/timeline.png" if verb == "plot" else "alias.out")
    if verb == "plot":  # its output is a folder: the input given as the folder, or as a picture in it
        folder = "plots" if how in ("hardlink", "symlink") else out
        argv = ["plot", "x.h5", "--out", folder, "--only", "timeline"]
    else:
        argv = {
            "report --html": ["report", "x.h5", "--html", out],
            "import": ["import", "kt.json", "--out", out],
            "export t4": ["export", "x.h5", "--format", "t4", "--out", out],
            "export kt-json": ["export", "x.h5", "--format", "kt-json", "--out", out],
        }[verb]
    refused(capsys, argv, f"{out} is the input")
    assert digest(inputs / source) == before  # not a byte changed
    no_temporaries(inputs)
    assert main(["check", "x.h5", "--no-repair"]) == 0
    assert "6 configurations recorded, sound" in capsys.readouterr().out


@pytest.mark.parametrize("how", WAYS)
def test_replay_does_not_write_onto_its_measured_data(inputs, how):
    """A replay runs under MPI, so in a process of its own; ``--append`` lets nothing through."""
    before = digest(inputs / "x.h5")
    out = same_file(inputs, "x.h5", how, "alias.h5")
    proc, took = offline("replay", "x.h5", "--out", out, "--append", cwd=inputs)
    assert proc.returncode == 2
    one_line(proc, "is the input")
    assert took < 30
    assert digest(inputs / "x.h5") == before
    no_temporaries(inputs)


def test_links_planted_where_outputs_and_temporary_files_went_are_not_followed(inputs, capsys):
    """Before, report --html wrote OUT.tmp, import and a run OUT.PID.partial, and plot wrote each
    picture in place: a link planted at any of those names was followed and its target overwritten.
    A link at the output's own name is replaced by the output."""
    victim = inputs / "victim"
    victim.write_bytes(b"not yours to write")
    (inputs / "plots").mkdir()
    planted = ["page.html.tmp", f"y.h5.{os.getpid()}.partial", "plots/timeline.png", "t4.json"]
    for name in planted:
        os.symlink(victim, inputs / name)
    assert main(["report", "x.h5", "--html", "page.html"]) == 0
    assert main(["import", "kt.json", "--out", "y.h5"]) == 0
    assert main(["plot", "x.h5", "--out", "plots", "--only", "timeline"]) == 0
    assert main(["export", "x.h5", "--format", "t4", "--out", "t4.json"]) == 0
    capsys.readouterr()
    assert victim.read_bytes() == b"not yours to write"
    assert [(inputs / name).is_symlink() for name in planted] == [True, True, False, False]
    assert (inputs / "page.html").read_text().startswith("<!doctype html>")
    assert (inputs / "plots/timeline.png").read_bytes().startswith(b"\x89PNG")
    assert json.loads((inputs / "t4.json").read_text())["results"]
    assert main(["check", "y.h5", "--no-repair"]) == 0 and "sound" in capsys.readouterr().out
    no_temporaries(inputs)


def test_an_output_of_the_longest_legal_name_is_written(inputs, capsys):
    """NAME_MAX (255 on the usual file systems) is the limit on the output's own name, not on it
    with a suffix for the temporary file."""
    name_max = os.pathconf(inputs, "PC_NAME_MAX")
    page, export, results = ("n" * (name_max - len(s)) + s for s in (".html", ".json", ".h5"))
    assert main(["report", "x.h5", "--html", page]) == 0
    assert main(["export", "x.h5", "--format", "kt-json", "--out", export]) == 0
    assert main(["import", "kt.json", "--out", results]) == 0
    assert capsys.readouterr().err == ""
    assert (inputs / page).read_text().startswith("<!doctype html>")
    assert len(json.loads((inputs / export).read_text())["cache"]) == 6
    assert main(["check", results, "--no-repair"]) == 0 and "6 configurations recorded" in capsys.readouterr().out
    no_temporaries(inputs)
