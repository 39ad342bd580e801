"""A replay of several measured files of one kernel and space, each on another device model: the
problem is the first file's and carries them all; files of another kernel or space are refused in
one line; ``for_replay_source`` makes the problem whose primary data is another file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SHARED_DATA

from mpitune.errors import UserError
from mpitune.model.problem import for_replay_source
from mpitune.model.restrictions import Restriction
from mpitune.spec.replay import replay_problem
from mpitune.spec.settings import Overrides
from mpitune.store import measured

CACHES = SHARED_DATA / "caches"
A100, A4000, GEMM = (str(CACHES / f"{n}.json.gz") for n in ("convolution_A100", "convolution_A4000", "gemm_RTX_3090"))


@pytest.fixture(scope="module")
def two():
    """The convolution measured on an A100 and an RTX A4000: one kernel and space."""
    if not Path(A100).is_file() or not Path(A4000).is_file():
        pytest.skip(f"needs the shared caches in {CACHES}")
    return measured.load(A100), measured.load(A4000)


def test_two_files_of_one_space_are_the_first_s_problem_carrying_both(two):
    a100, a4000 = two
    assert a100.kernel_name == a4000.kernel_name and a100.tune_params == a4000.tune_params
    assert a100.device_name != a4000.device_name
    problem, settings = replay_problem(a100, Overrides(seed=3), "random_sample", device_bias=(1.0, 1.2), more=[a4000])
    alone, alone_settings = replay_problem(a100, Overrides(seed=3), "random_sample", device_bias=(1.0, 1.2))
    replay = problem.kernel.replay
    assert replay is not None and [f.path for f in replay.files] == [A100, A4000]
    assert replay.path == A100 and replay.run == alone.kernel.replay.run and replay.seed == 3
    assert settings == alone_settings and Path(settings.cache_path).name == "convolution_A100.replay.h5"
    assert problem.identity() == alone.identity() and problem.configs == alone.configs
    assert [p.kernel.replay.path for p in problem.replayed] == [A100, A4000]
    # Each rank's share: world rank r replays file r % 2, with the bias and seed of the run.
    assert [replay.replayed_by(r).path for r in range(5)] == [A100, A4000, A100, A4000, A100]
    assert replay.replayed_by(3).device_bias == (1.0, 1.2) and replay.replayed_by(3).seed == 3


def test_one_file_is_replayed_as_before(two):
    problem, _ = replay_problem(two[0], Overrides())
    replay = problem.kernel.replay
    assert replay is not None and replay.files == () and problem.replayed == ()
    assert replay.replayed_by(5) is replay
    assert for_replay_source(problem, 0) is problem
    with pytest.raises(IndexError):
        for_replay_source(problem, 1)


def test_for_replay_source_gives_the_problem_of_that_file(two):
    a100, a4000 = two
    problem, _ = replay_problem(a100, Overrides(), more=[a4000])
    problem = replace(problem, restrictions=(Restriction("block_size_x >= 16", list(a100.tune_params)),))
    second = for_replay_source(problem, 1)
    own, _ = replay_problem(a4000, Overrides())
    assert second.identity() == replace(own, restrictions=problem.restrictions).identity()
    assert second.identity().replay_source == A4000 != problem.identity().replay_source
    assert second.kernel.spec_path == A4000 and second.configs == tuple(a4000.configs)
    assert second.kernel.replay.run == own.kernel.replay.run
    # The rest is the same: restrictions, aim, and which file each world rank replays.
    assert second.restrictions == problem.restrictions and second.aim == problem.aim
    assert second.kernel.replay.files == problem.kernel.replay.files and second.replayed == problem.replayed
    assert for_replay_source(second, 0).identity() == problem.identity()
    with pytest.raises(IndexError):
        for_replay_source(problem, 2)


def test_files_of_another_kernel_are_refused_naming_both_and_the_kernels(two):
    if not Path(GEMM).is_file():
        pytest.skip(f"needs {GEMM}")
    with pytest.raises(UserError) as refused:
        replay_problem(two[0], Overrides(), more=[two[1], measured.load(GEMM)])
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"{A100} and {GEMM} cannot be replayed together")
    assert "'convolution_kernel' and 'Xgemm'" in said


def _kt(path: Path, tune_params: dict[str, list[int]]) -> str:
    """A Kernel Tuner cache of kernel ``k`` over ``tune_params``, each configuration measured."""
    names = list(tune_params)
    first = [values[0] for values in tune_params.values()]
    entry = {**dict(zip(names, first)), "time": 1.0, "times": [1.0], "compile_time": 1.0}
    doc = {
        "device_name": path.stem,
        "kernel_name": "k",
        "problem_size": [8],
        "tune_params_keys": names,
        "tune_params": tune_params,
        "objective": "time",
        "cache": {",".join(map(str, first)): entry},
    }
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(
    "other, says",
    [
        ({"x": [1, 2], "z": [1]}, "their parameters differ (only the first has y; only the second has z)"),
        ({"y": [1], "x": [1, 2]}, "they list the same parameters in another order"),
        ({"x": [1, 4], "y": [1]}, "parameter x takes [1, 2] in the first and [1, 4] in the second"),
    ],
)
def test_files_of_another_space_are_refused_saying_what_differs(tmp_path, other, says):
    first = _kt(tmp_path / "a.json", {"x": [1, 2], "y": [1]})
    second = _kt(tmp_path / "b.json", other)
    with pytest.raises(UserError) as refused:
        replay_problem(measured.load(first), Overrides(), more=[measured.load(second)])
    assert str(refused.value) == f"{first} and {second} cannot be replayed together: {says}"
