"""benchmarks/vs_kernel_tuner.py without a GPU: the spec becomes arguments Kernel Tuner takes,
and Kernel Tuner builds the same search space from them. Kernel Tuner is the test extra's
(1.5.0, the version the benchmark compares against), so these run wherever the suite does.
"""

import configparser
import importlib.metadata
import importlib.util
import inspect

import pytest
from conftest import REPO

from mpitune.model.searchspace import SearchSpace

# Kernel Tuner is the test extra's; where it is absent (a GPU machine set up for CuPy alone) these
# tests skip with the reason and the rest of the suite runs.
kernel_tuner = pytest.importorskip(
    "kernel_tuner", reason="needs kernel_tuner (the test extra): pip install -e '.[test]'"
)
Searchspace = pytest.importorskip("kernel_tuner.searchspace").Searchspace

MAX_THREADS = 1024  # what Kernel Tuner reads from an H200; the spec's restrictions cap blocks there too


@pytest.fixture(scope="module")
def vs():
    spec = importlib.util.spec_from_file_location("vs_kernel_tuner", REPO / "benchmarks" / "vs_kernel_tuner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def matmul(vs, tmp_path, monkeypatch):
    """The default problem, at a size whose float64 answer is quick to compute."""
    monkeypatch.setenv("MATMUL_N", "256")
    return vs.load_problem(str(vs.DEFAULT_SPEC), str(tmp_path))


def test_the_test_extra_installs_the_kernel_tuner_the_benchmark_compares_against(vs):
    """setup.cfg's pin, the benchmark's version and the one these tests ran against are one."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    assert f"kernel_tuner=={vs.KT_VERSION}" in config["options.extras_require"]["test"].split()
    assert importlib.metadata.version("kernel_tuner") == vs.KT_VERSION


def test_every_argument_is_one_tune_kernel_takes(vs, matmul):
    kwargs = vs.kt_arguments(matmul)
    signature = inspect.signature(kernel_tuner.tune_kernel)
    assert set(kwargs) <= set(signature.parameters), set(kwargs) - set(signature.parameters)
    signature.bind(**kwargs)  # and every required one is there
    assert (kwargs["lang"], kwargs["strategy"], kwargs["cache"]) == ("cupy", "brute_force", None)
    assert kwargs["kernel_source"] == (REPO / "examples" / "matmul_cupy" / "matmul.cu").read_text()
    assert kwargs["iterations"] == matmul.kernel.iterations == 7
    assert kwargs["compiler_options"] == ["-DN=256"]
    assert kwargs["atol"] == matmul.kernel.atol and kwargs["answer"] is matmul.kernel.answer
    assert kwargs["arguments"][1] is matmul.kernel.arguments[1]
    assert kwargs["grid_div_x"] == ["block_size_x", "tile_size_x"]
    assert kwargs["grid_div_y"] == ["block_size_y", "tile_size_y"]
    assert kwargs["block_size_names"] is None  # the default of both tuners
    assert kwargs["restrictions"] == [r.text for r in matmul.restrictions]


def test_kernel_tuner_builds_the_same_search_space(vs, matmul):
    kwargs = vs.kt_arguments(matmul)
    theirs = Searchspace(kwargs["tune_params"], kwargs["restrictions"], MAX_THREADS)
    ours = SearchSpace.build(matmul.kernel.tune_params, matmul.restrictions)
    assert theirs.size == len(ours) == 265
    assert set(theirs.list) == {tuple(ours.config(i).values()) for i in range(len(ours))}


def test_callable_restrictions_keep_their_meaning_in_kernel_tuner(vs, tmp_path):
    (tmp_path / "spec.py").write_text(
        "import numpy as np\n"
        "def tiles_wider_than_high(p):\n"
        "    return p['tile_x'] > p['tile_y']\n"
        "kernel_name = 'k'\n"
        "kernel_source = 'extern \"C\" __global__ void k(float *x) {}'\n"
        "arguments = [np.zeros(4, np.float32)]\n"
        "tune_params = {'tile_y': [1, 2, 4], 'block_size_x': [32, 64], 'tile_x': [1, 2, 4]}\n"
        "restrictions = ['block_size_x * tile_x <= 128', tiles_wider_than_high]\n"
    )
    problem = vs.load_problem(str(tmp_path / "spec.py"), str(tmp_path))
    restrictions = vs.kt_arguments(problem)["restrictions"]
    assert restrictions[0] == "block_size_x * tile_x <= 128"
    ours = SearchSpace.build(problem.kernel.tune_params, problem.restrictions)
    expected = {tuple(ours.config(i).values()) for i in range(len(ours))}
    assert expected == {(1, 32, 2), (1, 32, 4), (2, 32, 4), (1, 64, 2)}
    assert set(Searchspace(problem.kernel.tune_params, restrictions, MAX_THREADS).list) == expected
    # Kernel Tuner's check of a single configuration calls it by name.
    assert restrictions[1](tile_y=1, block_size_x=32, tile_x=2)
    assert not restrictions[1](tile_y=2, block_size_x=32, tile_x=1)
    # As the only restriction, too.
    alone = Searchspace(problem.kernel.tune_params, [restrictions[1]], MAX_THREADS)
    assert set(alone.list) == {(y, b, x) for y in (1, 2, 4) for b in (32, 64) for x in (1, 2, 4) if x > y}


def test_a_spec_for_another_language_is_refused(vs, tmp_path):
    with pytest.raises(vs.UserError, match="lang is 'C'"):
        vs.load_problem(str(REPO / "examples" / "matmul_c" / "spec.py"), str(tmp_path))
