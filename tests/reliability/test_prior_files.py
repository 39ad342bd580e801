"""The files a spec names for mpitune to read, priors above all: what is not a regular file (a
named pipe, a device, a directory, a symbolic link that loops or leads nowhere) is refused in one
line saying what it is, without opening it; a prior is used once whatever names it; the run's own
results file is no prior under any name; a prior with no usable time is refused; and what a Kernel
Tuner cache may expand to is bounded."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest
from conftest import mpitune, scale_prior, write_scale_spec

from mpitune.errors import SpecError, UserError, not_a_file
from mpitune.spec.load import load_spec
from mpitune.spec.settings import Overrides
from mpitune.store.measured import read_kt_json


def not_regular(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the refusal says it is), each made for real."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    os.symlink("loop_b", tmp_path / "loop_a")
    os.symlink("loop_a", tmp_path / "loop_b")
    os.symlink("gone.json", tmp_path / "dangling")
    return {
        "fifo": (str(tmp_path / "fifo"), "is a named pipe (FIFO), not a regular file"),
        "device": ("/dev/null", "is a character device, not a regular file"),
        "directory": (str(tmp_path / "folder"), "is a directory, not a regular file"),
        "loop": (str(tmp_path / "loop_a"), "is a symbolic link that loops"),
        "dangling": (str(tmp_path / "dangling"), "is a symbolic link to nothing (gone.json)"),
    }


KINDS = ["fifo", "device", "directory", "loop", "dangling"]


@pytest.mark.parametrize("kind", KINDS)
def test_what_is_not_a_regular_file_is_named_from_stat_alone(tmp_path, kind):
    path, said = not_regular(tmp_path)[kind]
    assert not_a_file(path) == said
    assert not_a_file(str(scale_prior(tmp_path / "p.json"))) is None and not_a_file(str(tmp_path / "no")) is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given_in", ["spec", "command line", "kernel_source"])
def test_a_prior_or_kernel_source_that_is_not_a_regular_file_is_refused_saying_what_it_is(tmp_path, kind, given_in):
    path, said = not_regular(tmp_path)[kind]
    spec = write_scale_spec(tmp_path)
    overrides = Overrides(prior=(path,)) if given_in == "command line" else None
    if given_in == "spec":
        spec.write_text(spec.read_text() + f"prior = {path!r}\n")
    if given_in == "kernel_source":
        spec.write_text(spec.read_text().replace('"scale.c"', repr(path)))
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        load_spec(str(spec), overrides)
    assert time.monotonic() - started < 30  # a FIFO is never opened: opening one waits for a writer
    field = "kernel_source" if given_in == "kernel_source" else "prior"
    assert err.value.field == field and said in str(err.value) and "not found" not in str(err.value)


def test_a_fifo_prior_ends_every_rank_with_one_line(tmp_path):
    spec = write_scale_spec(tmp_path)
    os.mkfifo(tmp_path / "prior.json")
    proc = mpitune(2, [str(spec), "--prior", str(tmp_path / "prior.json")], tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if "mpitune: error" in line]
    assert lines == [
        f"mpitune: error: {spec}: prior: {tmp_path / 'prior.json'} is a named pipe (FIFO), not a regular file"
    ]
    assert "Traceback" not in proc.stderr


def test_one_prior_named_by_path_symlink_and_hard_link_is_used_once(tmp_path):
    spec = write_scale_spec(tmp_path)
    prior = scale_prior(tmp_path / "prior.json")
    os.symlink("prior.json", tmp_path / "soft.json")
    os.link(prior, tmp_path / "hard.json")
    spec.write_text(spec.read_text() + "prior = ['prior.json', 'soft.json', 'hard.json']\n")
    _, settings = load_spec(str(spec), Overrides(prior=(str(tmp_path / "." / "hard.json"),)))
    assert settings.prior == (str(prior),)
    other = scale_prior(tmp_path / "other.json")  # a second file with the same bytes is another prior
    _, settings = load_spec(str(spec), Overrides(prior=(str(other),)))
    assert settings.prior == (str(prior), str(other))


@pytest.mark.parametrize("link", ["symlink", "hard link", "path"])
def test_the_run_s_own_results_file_is_no_prior_under_any_name(tmp_path, link):
    spec = write_scale_spec(tmp_path)
    results = tmp_path / "spec.h5"
    results.write_bytes(b"")  # only its identity matters here; the run would resume it
    name = tmp_path / "earlier.h5"
    {"symlink": lambda: os.symlink(results, name), "hard link": lambda: os.link(results, name)}.get(
        link, lambda: None
    )()
    given = results if link == "path" else name
    with pytest.raises(SpecError, match=f"prior: {given} is this run's own results file {results}, not a prior$"):
        load_spec(str(spec), Overrides(prior=(str(given),), cache_path=str(results)))


def write_prior_times(path: Path, time_ms: float) -> Path:
    """The scale prior with every passing configuration's time set to ``time_ms``."""
    document = json.loads(scale_prior(path).read_text())
    for entry in document["cache"].values():
        if not isinstance(entry["time"], str):
            entry["time"], entry["times"] = time_ms, [time_ms]
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("time_ms", [0.0, -1.0])
def test_a_prior_whose_times_are_all_zero_or_negative_is_refused(tmp_path, time_ms):
    spec = write_scale_spec(tmp_path)
    prior = write_prior_times(tmp_path / "prior.json", time_ms)
    proc = mpitune(1, [str(spec), "--prior", str(prior), "--max-fevals", "1"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"mpitune: error: {spec}: prior: {prior}: it has no usable time: 7 of its 8 times are 0 or below"
    )
    assert not (tmp_path / "spec.h5").exists()  # refused before anything was measured


def gzip_of_spaces(path: Path, mib: int) -> Path:
    """A Kernel Tuner cache whose gzip is small and holds ``mib`` MiB of JSON (mostly blanks)."""
    document = json.loads(scale_prior(path.with_suffix("")).read_text())
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(json.dumps(document)[:-1].encode())
        for _ in range(mib):
            fh.write(b" " * (1 << 20))
        fh.write(b"}")
    return path


def test_what_a_kernel_tuner_cache_may_expand_to_is_bounded(tmp_path, monkeypatch):
    small = gzip_of_spaces(tmp_path / "small.json.gz", 1)
    large = gzip_of_spaces(tmp_path / "large.json.gz", 3)
    assert large.stat().st_size < 64 << 10  # a few KiB that expand to 3 MiB
    monkeypatch.setenv("MPITUNE_KT_JSON_MAX_MB", "2")
    assert read_kt_json(str(small))["kernel_name"] == "scale"
    with pytest.raises(UserError, match=r"large.json.gz: more than 2 MiB once decompressed \(MPITUNE_KT_JSON_MAX_MB"):
        read_kt_json(str(large))
    monkeypatch.setenv("MPITUNE_KT_JSON_MAX_MB", "4")
    assert read_kt_json(str(large))["kernel_name"] == "scale"
    monkeypatch.setenv("MPITUNE_KT_JSON_MAX_MB", "-1")
    with pytest.raises(UserError, match="environment variable MPITUNE_KT_JSON_MAX_MB"):
        read_kt_json(str(large))


def test_a_bounded_prior_is_refused_by_the_run_in_one_line(tmp_path, monkeypatch):
    spec = write_scale_spec(tmp_path)
    prior = gzip_of_spaces(tmp_path / "prior.json.gz", 3)
    monkeypatch.setenv("MPITUNE_KT_JSON_MAX_MB", "2")  # the ranks' environment is this one's
    proc = mpitune(2, [str(spec), "--prior", str(prior)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"mpitune: error: {spec}: prior: {prior}: more than 2 MiB")


@pytest.mark.parametrize("damage", ["cut", "not utf-8"])
def test_a_cut_gzip_or_text_that_is_not_utf8_is_one_line(tmp_path, damage):
    path = tmp_path / "prior.json.gz"
    gzip_of_spaces(path, 1)
    if damage == "cut":
        path.write_bytes(path.read_bytes()[:-20])
    else:
        path.write_bytes(gzip.compress(b'{"kernel_name": "\xff"}'))
    with pytest.raises(UserError, match=r"cannot read|not UTF-8 text") as err:
        read_kt_json(str(path))
    assert "\n" not in str(err.value)
