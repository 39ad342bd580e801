"""Rank 0 loads the spec while MPI starts beside it: the run's clock begins with the spec, and
what the spec raises still reaches the loop, with real threads and a real mpiexec."""

from __future__ import annotations

import threading
import time

import h5py
import pytest
from conftest import mpitune, write_scale_spec

from mpitune.errors import SpecError
from mpitune.scheduling.before_mpi import Preloaded, load_while, warm_while

SLEEP_S = 1.5


def test_the_start_runs_in_another_thread_while_the_load_runs_here():
    seen: dict[str, object] = {}

    def start() -> str:
        seen["start"] = threading.current_thread()
        time.sleep(0.3)
        return "MPI"

    def load():
        seen["load"] = threading.current_thread()
        time.sleep(0.3)
        return "problem", "settings"

    began = time.perf_counter()
    started, preloaded = load_while(start, load)
    took_s = time.perf_counter() - began
    assert started == "MPI" and preloaded() == ("problem", "settings")
    assert seen["load"] is threading.main_thread() and seen["start"] is not threading.main_thread()
    assert took_s < 0.55  # side by side, not 0.6 s one after the other
    assert began <= preloaded.started < preloaded.ended <= began + took_s


def test_what_the_load_raises_waits_for_the_loop_and_what_the_start_raises_is_raised():
    def refuse():
        raise SpecError("spec.py", "tune_params", "must be a dict")

    _, preloaded = load_while(lambda: None, refuse)
    assert isinstance(preloaded, Preloaded) and isinstance(preloaded.error, SpecError)
    with pytest.raises(SpecError, match="tune_params"):
        preloaded()

    def broken_mpi():
        raise ImportError("no MPI library")

    with pytest.raises(ImportError, match="no MPI library"):
        load_while(broken_mpi, lambda: ("problem", "settings"))


def test_another_rank_reads_ahead_beside_the_start_and_lets_its_errors_go_but_not_an_interrupt():
    seen: dict[str, object] = {}

    def start() -> str:
        time.sleep(0.3)
        return "MPI"

    def warm() -> None:
        seen["warm"] = threading.current_thread()
        time.sleep(0.3)

    began = time.perf_counter()
    assert warm_while(start, warm) == "MPI"
    assert seen["warm"] is threading.main_thread() and time.perf_counter() - began < 0.55

    def unreadable() -> None:
        raise SpecError("data.json", "cache", "not JSON")  # rank 0 says so, to every rank

    assert warm_while(lambda: "MPI", unreadable) == "MPI"

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        warm_while(lambda: "MPI", interrupted)


def test_the_run_begins_with_the_spec_and_mpi_starts_beside_it(tmp_path):
    spec = write_scale_spec(tmp_path, extra=f"import time\ntime.sleep({SLEEP_S})\n")
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as f:
        rows = f["timeline"][...]
    first = {}
    for rank in (0, 1):
        mine = rows[(rows["rank"] == rank) & (rows["phase"] != b"worker_start")]
        first[rank] = mine[mine["start_s"] == mine["start_s"].min()][0]
    spec = rows[(rows["rank"] == 0) & (rows["phase"] == b"spec")]
    assert len(spec) == 1 and spec["start_s"][0] == 0.0  # the run's clock begins with the spec
    assert spec["end_s"][0] >= SLEEP_S
    (mpi_start,) = rows[(rows["rank"] == 0) & (rows["phase"] == b"startup") & (rows["start_s"] == spec["end_s"][0])]
    # MPI was up (or nearly) when the spec was done: it started beside it, not after it.
    assert mpi_start["end_s"] - mpi_start["start_s"] < 0.5 * SLEEP_S
    # Rank 1 started MPI and then waited for rank 0's spec, from the run's beginning.
    assert first[1]["phase"] == b"startup" and first[1]["start_s"] == 0.0
    assert first[1]["end_s"] >= SLEEP_S
