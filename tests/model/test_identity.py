"""The problem's identity keeps the JSON and hash that files written before it hold, byte for byte:
the literals below are what the dict-building code of earlier versions wrote for the same problem,
so a file tuned before resumes and is not taken for results of a different problem."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np

from mpitune.model.identity import ProblemIdentity
from mpitune.model.kernel_extras import KernelExtras
from mpitune.model.problem import Kernel, Problem
from mpitune.model.restrictions import Restriction


def small(p):
    return p["BS"] * p["U"] <= 512


def spec_problem(**changes) -> Problem:
    """A problem with every part of the identity: numpy values, a string and a function as
    restrictions, grid_div of each kind, defines, smem_args, cmem_args and observed values."""
    tune_params = {"BS": [np.int32(32), 64, 128], "U": [1, 2, 4], "KIND": ["a", "ü"], "F": [0.5, 1.0]}
    kernel = Kernel(
        spec_path="spec.py",
        kernel_name="vec_add",
        kernel_source='__global__ void vec_add(float *c) { /* "ü" */ }\n',
        lang="CUDA",
        problem_size=(1024, 7),
        arguments=[np.zeros(1024, np.float32), np.int32(3), np.zeros((2, 3), np.float64)],
        answer=None,
        atol=1e-6,
        tune_params=tune_params,
        grid_div={"x": ["BS", "U"], "y": None, "z": "1"},
        block_size_names=("BS",),
        iterations=5,
        compiler_options=("-O3", "--use_fast_math"),
        observed_names=("nvml_energy", "nvml_power"),
        extras=KernelExtras(
            defines={"N": "BS * 2", "M": small}, smem_size="BS * 4", cmem={"lut": np.zeros(8, np.int16)}
        ),
    )
    return Problem(replace(kernel, **changes), (Restriction("BS * U >= 64", list(tune_params)), small))


# What the earlier code (Problem.identity() as a dict, plus the run's "devices") wrote and hashed.
SPEC_JSON = (
    '{"arguments": ["<f4[1024]", "<i4[]", "<f8[2, 3]"], "block_size_names": ["BS"], "cmem_args": {"lut": "<i2[8]"}, '
    '"compiler_options": ["-O3", "--use_fast_math"], "defines": {"M": "def small(p):\\n    return p[\\"BS\\"] * '
    'p[\\"U\\"] <= 512", "N": "BS * 2"}, "devices": ["NVIDIA H100", "NVIDIA A100"], "grid_div": {"x": ["BS", "U"], '
    '"y": null, "z": "1"}, "iterations": 5, "kernel_name": "vec_add", "kernel_source": "__global__ void '
    'vec_add(float *c) { /* \\"\\u00fc\\" */ }\\n", "lang": "CUDA", "observed_names": ["nvml_energy", "nvml_power"], '
    '"problem_size": [1024, 7], "replay_source": "", "restrictions": ["BS * U >= 64", "def small(p):\\n    return '
    'p[\\"BS\\"] * p[\\"U\\"] <= 512"], "smem_args": "BS * 4", "tune_params": {"BS": [32, 64, 128], "F": [0.5, 1.0], '
    '"KIND": ["a", "\\u00fc"], "U": [1, 2, 4]}}'
)
SPEC_HASH = "0b88bdb98370da762c30ae561337a838ecac622e91fe50295f9cefad2ed47a84"


def test_a_tuned_problem_writes_and_hashes_what_earlier_versions_wrote():
    identity = spec_problem().identity(["NVIDIA H100", "NVIDIA A100"])
    assert identity.to_json() == SPEC_JSON
    assert identity.digest() == SPEC_HASH == hashlib.sha256(SPEC_JSON.encode()).hexdigest()
    assert ProblemIdentity.from_json(SPEC_JSON) == identity


def test_what_a_problem_lacks_stays_out_of_the_json():
    """No extras, no observed values, no devices (a problem before a run): none of their keys,
    as files from before those existed were written."""
    identity = spec_problem(extras=None, observed_names=()).identity()
    record = json.loads(identity.to_json())
    assert not {"defines", "smem_args", "cmem_args", "observed_names", "devices", "imported_from"} & set(record)
    assert record["grid_div"] == {"x": ["BS", "U"], "y": None, "z": "1"} and record["replay_source"] == ""
    assert identity.digest() == "87b6d477868d45fe5510843771366377930b7b884812a31a67f277b6289b281d" != SPEC_HASH
    assert ProblemIdentity.from_json(identity.to_json()) == identity


def test_an_imported_kernel_tuner_cache_writes_what_the_earlier_import_wrote():
    """The dict the import built before this type, literally: no launch settings, its source file."""
    earlier = {
        "kernel_name": "cn_pnpoly",
        "kernel_source": "",
        "lang": "",
        "arguments": [],
        "problem_size": [20000000],
        "tune_params": {"block_size_x": [32, 64], "tile_size": [1, 2, 4], "use_method": [0, 1, 2]},
        "restrictions": [],
        "iterations": 10,
        "devices": ["NVIDIA GeForce RTX 3090"],
        "imported_from": "pnpoly_RTX_3090.json.gz",
        "observed_names": ["GFLOP/s"],
    }
    identity = ProblemIdentity(
        kernel_name="cn_pnpoly",
        kernel_source="",
        lang="",
        problem_size=(20000000,),
        arguments=(),
        tune_params={"block_size_x": (32, 64), "tile_size": (1, 2, 4), "use_method": (0, 1, 2)},
        restrictions=(),
        iterations=10,
        devices=("NVIDIA GeForce RTX 3090",),
        imported_from="pnpoly_RTX_3090.json.gz",
        observed_names=("GFLOP/s",),
    )
    text = json.dumps(earlier, sort_keys=True)
    assert identity.to_json() == text
    assert identity.digest() == hashlib.sha256(text.encode()).hexdigest()
    assert identity.record() == earlier
    assert ProblemIdentity.from_json(text) == identity


def test_a_record_from_another_version_reads_and_names_what_differs():
    """Keys this version does not know are passed over when read, and count when compared."""
    identity = spec_problem().identity(["NVIDIA H100"])
    record = {**identity.record(), "iterations": 9, "made_later": True}
    assert ProblemIdentity.from_record(record) == replace(identity, iterations=9)
    assert identity.differing(json.dumps(record)) == ["iterations", "made_later"]
    assert identity.differing(identity.to_json()) == []
