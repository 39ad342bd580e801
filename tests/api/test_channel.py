"""What a tune_kernel call sends to the ranks of its MPI job: plain data, never code."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from mpitune.api import channel
from mpitune.errors import SpecError
from mpitune.observers import NVMLObserver


def test_every_kind_of_keyword_value_round_trips_as_data(tmp_path):
    names = {
        "arguments": [np.zeros(4, np.float32), np.int32(7), np.float64(0.5)],
        "tune_params": {"block_size_x": [32, 64], "T": ["float", "double"]},
        "problem_size": (64, 2),
        "atol": 1e-3,
        "answer": [np.arange(4.0), None, None],
        "verbose": True,
        "cmem_args": {"coeffs": np.array([1.5, -0.5], np.float32)},
        "restrictions": ["block_size_x >= 32"],
        "observers": [NVMLObserver(["nvml_energy"], continuous_duration=0.5)],
    }
    stem = str(tmp_path / "job")
    channel.save_call(stem, names, "tune_kernel")
    back = channel.load_call(stem)
    assert back.keys() == names.keys()
    assert back["arguments"][0].dtype == np.float32 and back["arguments"][1] == np.int32(7)
    assert type(back["arguments"][1]) is np.int32 and type(back["arguments"][2]) is np.float64
    assert back["tune_params"] == names["tune_params"] and back["problem_size"] == (64, 2)
    assert np.array_equal(back["answer"][0], names["answer"][0]) and back["answer"][1:] == [None, None]
    assert np.array_equal(back["cmem_args"]["coeffs"], names["cmem_args"]["coeffs"])
    observer = back["observers"][0]
    assert isinstance(observer, NVMLObserver) and observer.observables == names["observers"][0].observables
    assert observer.continuous_duration == 0.5
    # What lies on disk is JSON and arrays that numpy reads without unpickling anything.
    json.loads((tmp_path / "job.json").read_text())
    with zipfile.ZipFile(tmp_path / "job.npz") as npz:
        assert all(name.endswith(".npy") for name in npz.namelist())
    np.load(tmp_path / "job.npz", allow_pickle=False)


@pytest.mark.parametrize("name, value", [("metrics", {"x": object()}), ("arguments", [np.array([None], object)])])
def test_what_is_not_plain_data_is_refused_naming_the_keyword(tmp_path, name, value):
    with pytest.raises(SpecError, match=f"^tune_kernel: {name}: cannot be sent to the ranks"):
        channel.save_call(str(tmp_path / "job"), {name: value}, "tune_kernel")
