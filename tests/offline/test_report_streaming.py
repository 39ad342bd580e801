"""``report`` reads a file a slice of rows at a time: the summary of a streamed file is the
summary of the file read whole, to the last digit, and what it holds is a slice, not the file.
A real replay of measured data on 2 ranks (4,092 configurations, calibrations and a confirmation)."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import asdict

import pytest
from conftest import mpitune

from mpitune.offline.report import render
from mpitune.offline.summary import summarize, summarize_rows
from mpitune.store import reader


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, pnpoly):
    tmp = tmp_path_factory.mktemp("streamed")
    out = tmp / "pnpoly.replay.h5"
    proc = mpitune(2, ["replay", str(pnpoly), "--strategy", "brute_force", "--out", str(out)], tmp, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("chunk_rows", [97, 4096])
def test_a_streamed_summary_is_the_summary_of_the_file_read_whole(replayed, monkeypatch, chunk_rows):
    whole = asdict(summarize(reader.read(str(replayed)), top=12))
    monkeypatch.setattr(reader, "CHUNK_ROWS", chunk_rows)
    with reader.streamed(str(replayed)) as rows:
        streamed = asdict(summarize_rows(rows, top=12))
    assert json.dumps(streamed) == json.dumps(whole)  # every float alike, every key in its order
    assert whole["configs"] == 4092 and len(whole["top"]) == 12
    assert whole["confirmation"] is not None and whole["gather"]["rank_batches"] > 0


def test_every_slice_holds_at_most_the_chunk(replayed, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_ROWS", 500)
    with reader.streamed(str(replayed)) as rows:
        sizes = [len(part.results) for part in rows.results()]
        assert all(len(part.metrics) == len(part.observed) == len(part.results) for part in rows.results())
        timeline = [len(chunk) for chunk in rows.timeline()]
    assert sum(sizes) == 4092 and max(sizes) == 500
    assert max(timeline) == 500 and sum(timeline) == len(reader.read(str(replayed)).timeline)


def test_a_report_holds_a_slice_of_rows_not_the_file(replayed, monkeypatch):
    """The results decoded whole are 5.5 KB a row (the error text alone 4 KB); the report keeps a
    slice of them and a few numbers per row."""
    whole = reader.read(str(replayed)).results.nbytes
    monkeypatch.setattr(reader, "CHUNK_ROWS", 256)
    tracemalloc.start()
    try:
        text = render(str(replayed))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "4092 of 4092 configurations recorded" in text
    assert peak_bytes < whole / 4, (peak_bytes, whole)
