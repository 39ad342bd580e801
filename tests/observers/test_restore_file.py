"""The restore file: written whole or not at all, never over saved originals. No NVML needed."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path

import pytest

from mpitune.errors import UserError
from mpitune.observers import restore_file
from mpitune.observers.restore_file import SavedSettings

SAVED = SavedSettings(
    host="node07", pci_bus_id="00000000:19:00.0", graphics_clock_mhz=1980, mem_clock_mhz=3201, power_limit_mw=700000
)


def test_saved_settings_read_back_as_written(tmp_path: Path):
    path = str(tmp_path / "r.json")
    restore_file.write_new(path, SAVED)
    assert restore_file.read_saved(path) == SAVED
    assert os.listdir(tmp_path) == ["r.json"]  # the temporary file is gone


def test_settings_a_run_does_not_change_stay_none(tmp_path: Path):
    path = str(tmp_path / "r.json")
    power_only = SavedSettings(host="node07", pci_bus_id="00000000:19:00.0", power_limit_mw=500000)
    restore_file.write_new(path, power_only)
    assert restore_file.read_saved(path) == power_only


def test_saved_originals_are_never_overwritten(tmp_path: Path):
    path = str(tmp_path / "r.json")
    restore_file.write_new(path, SAVED)
    changed = SavedSettings(
        host="node07", pci_bus_id="00000000:19:00.0", graphics_clock_mhz=1200, mem_clock_mhz=3201, power_limit_mw=400000
    )
    with pytest.raises(FileExistsError):
        restore_file.write_new(path, changed)
    assert restore_file.read_saved(path) == SAVED
    assert os.listdir(tmp_path) == ["r.json"]


def _race(path: str, clock: int, ready, go, results) -> None:
    ready.wait()
    go.wait()
    try:
        restore_file.write_new(path, SavedSettings(host="h", pci_bus_id="b", graphics_clock_mhz=clock))
        results.put(clock)
    except FileExistsError:
        results.put(-1)


def test_of_writers_racing_for_one_file_exactly_one_wins_whole(tmp_path: Path):
    path = str(tmp_path / "r.json")
    ctx = multiprocessing.get_context("spawn")
    n = 6
    ready, go, results = ctx.Barrier(n + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(path, 1000 + i, ready, go, results)) for i in range(n)]
    for p in procs:
        p.start()
    ready.wait()
    go.set()
    outcome = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    winners = [c for c in outcome if c != -1]
    assert len(winners) == 1 and outcome.count(-1) == n - 1
    assert restore_file.read_saved(path).graphics_clock_mhz == winners[0]
    assert os.listdir(tmp_path) == ["r.json"]


def test_no_file_means_nothing_to_restore(tmp_path: Path):
    assert restore_file.read_saved(str(tmp_path / "absent.json")) is None


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "mpitune-nvml-restore-1", "host": "n", "pci_bus_id": "b", "power_limit_mw": 7',
        '{"format": "other", "host": "n", "pci_bus_id": "b"}',
        '{"format": "mpitune-nvml-restore-1", "host": "n", "pci_bus_id": "b", "power_limit_mw": true}',
        '{"format": "mpitune-nvml-restore-1", "host": "n", "pci_bus_id": "b", "fan_speed": 3}',
        '{"format": "mpitune-nvml-restore-1", "pci_bus_id": "b"}',
        "[1, 2]",
    ],
)
def test_a_file_that_is_not_saved_settings_is_named(tmp_path: Path, text: str):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(UserError, match=f"^observers: .*{path.name}"):
        restore_file.read_saved(str(path))


def test_remove_deletes_the_file(tmp_path: Path):
    path = str(tmp_path / "r.json")
    restore_file.write_new(path, SAVED)
    restore_file.remove(path)
    assert not os.path.exists(path)


def test_each_gpu_of_each_node_has_its_own_file_next_to_the_cache(tmp_path: Path):
    cache = str(tmp_path / "mm.h5")
    a = restore_file.path_for(cache, "00000000:19:00.0", host="node07")
    b = restore_file.path_for(cache, "00000000:3B:00.0", host="node07")
    c = restore_file.path_for(cache, "00000000:19:00.0", host="node08")
    assert a == cache + ".nvml-restore-node07-00000000_19_00.0.json"
    assert len({a, b, c}) == 3
    assert restore_file.path_for(cache, "00000000:19:00.0") == restore_file.path_for(
        cache, "00000000:19:00.0", host=socket.gethostname()
    )


def test_the_file_is_plain_json_a_person_can_read(tmp_path: Path):
    path = tmp_path / "r.json"
    restore_file.write_new(str(path), SAVED)
    assert json.loads(path.read_text()) == {
        "format": "mpitune-nvml-restore-1",
        "host": "node07",
        "pci_bus_id": "00000000:19:00.0",
        "graphics_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "power_limit_mw": 700000,
    }
