"""Launch geometry and the source a GPU compiler gets, with Kernel Tuner's conventions: pure, so
checked without a GPU (tests/backends/test_cupy.py launches them on one)."""

from __future__ import annotations

import pytest

from mpitune.backends.gpu.geometry import Geometry, block_dims, configured, grid_dims, kernel_code, template_name
from mpitune.model.kernel_extras import Derived
from mpitune.model.work import Work

DEFAULT_NAMES = ["block_size_x", "block_size_y", "block_size_z"]
NO_DIV = {"x": None, "y": None, "z": None}


@pytest.mark.parametrize(
    "size, config, grid_div, names, expected",
    [
        ((1000,), {"block_size_x": 256}, NO_DIV, DEFAULT_NAMES, (4, 1, 1)),
        ((1024, 300), {"block_size_x": 32, "block_size_y": 4}, NO_DIV, DEFAULT_NAMES, (32, 75, 1)),
        ((1000,), {"other": 7}, NO_DIV, DEFAULT_NAMES, (1000, 1, 1)),  # block size not tuned: divisor 1
        (
            (1000, 300),
            {"block_size_x": 32, "tile": 4},
            {"x": ["block_size_x", "tile"], "y": None, "z": None},
            DEFAULT_NAMES,
            (8, 300, 1),
        ),
        (
            (1000, 300),
            {"block_size_y": 4, "tile": 4},
            {"x": None, "y": "block_size_y*tile*2", "z": None},
            DEFAULT_NAMES,
            (1000, 10, 1),
        ),
        ((1000,), {"block_size_x": 32}, {"x": "block_size_x / 2.5", "y": None, "z": None}, DEFAULT_NAMES, (79, 1, 1)),
        ((64, 64, 10), {"bx": 16, "by": 8}, NO_DIV, ["bx", "by"], (4, 8, 10)),
    ],
)
def test_grid_follows_kernel_tuner_conventions(size, config, grid_div, names, expected):
    assert grid_dims(size, config, grid_div, names) == expected


def test_grid_refuses_a_zero_divisor():
    with pytest.raises(ValueError, match="positive"):
        grid_dims((10,), {"t": 0}, {"x": "t", "y": None, "z": None}, DEFAULT_NAMES)


def test_block_takes_named_parameters_and_defaults_to_one():
    assert block_dims({"block_size_x": 64, "x": 3}, DEFAULT_NAMES) == (64, 1, 1)
    assert block_dims({"bx": 8, "by": 4}, ["bx", "by"]) == (8, 4, 1)


def test_source_gets_defines_before_the_users_first_line():
    code = kernel_code("__global__ void k() {}", {"block_size_x": 128, "T": "float", "F": True}, (128, 1, 1), (8, 1, 1))
    head, body = code.split("#line 1\n")
    assert body == "__global__ void k() {}"
    lines = head.splitlines()
    assert "#define block_size_x 128" in lines and "#define T float" in lines
    assert "#define F 1" in lines and "#define grid_size_x 8" in lines
    assert "#define block_size_z 1" in lines and "#define grid_size_z 1" in lines
    assert sum(line.startswith("#define block_size_x ") for line in lines) == 1


def test_template_arguments_take_the_configurations_values():
    assert template_name("axpb<float, tile>", {"tile": 4, "block_size_x": 64}) == "axpb<float, 4>"
    assert template_name("vadd", {"tile": 4}) == "vadd"


def test_a_configuration_gets_its_source_and_name_expression_or_why_not():
    geometry = Geometry((1000,), {"x": ["block_size_x", "tile"], "y": None, "z": None}, tuple(DEFAULT_NAMES))
    code, name = configured("k", "axpb<float, tile>", Work(0, {"block_size_x": 32, "tile": 4}), geometry)
    assert name == "axpb<float, 4>" and "#define grid_size_x 8\n" in code and code.endswith("#line 1\nk")
    assert geometry.dims({"block_size_x": 32, "tile": 4}) == ((8, 1, 1), (32, 1, 1))
    spec = configured("k", "k", Work(0, {"block_size_x": 32, "tile": 4}, Derived({"ONLY": "1"}, 0)), geometry)
    assert spec == ("#define ONLY 1\n#line 1\nk", "k")  # the spec's defines, exactly
    why = configured("k", "k", Work(0, {"block_size_x": 32, "tile": 0}), geometry)
    assert isinstance(why, str) and why.startswith("cannot compute the launch geometry: grid_div_x is 0")
