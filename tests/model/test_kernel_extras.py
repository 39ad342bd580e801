"""defines, smem_args and cmem_args: resolved on rank 0, checked at load, used by real runs."""

from __future__ import annotations

import h5py
import pytest
from conftest import mpitune, write_scale_spec

from mpitune.model.kernel_extras import Derived, KernelExtras, parse, substitute


def fail(field, message):
    raise ValueError(f"{field}: {message}")


def test_substitute_replaces_whole_words_only():
    assert substitute("tile_x*2 + tile_xy", {"tile_x": 4, "tile_xy": 8}) == "4*2 + 8"
    assert substitute("float, T", {"T": True}) == "float, 1"


def test_derive_resolves_callables_strings_and_constants():
    extras = parse({"A": lambda p: p["x"] * 2, "B": "x + 1", "C": 7}, {"size": "x * 4"}, None, {"x": 1}, fail)
    assert extras.varies
    assert extras.derive({"x": 3}) == Derived({"A": "6", "B": "3 + 1", "C": "7"}, 12)
    assert KernelExtras(smem_size=0).varies is False
    # What travels to the ranks holds no callable.
    assert extras.for_workers().defines is None and extras.for_workers().smem_size == 0


@pytest.mark.parametrize(
    "defines, smem, cmem, field",
    [
        (["A"], None, None, "defines"),
        ({"not an identifier": 1}, None, None, "defines"),
        ({"A": lambda p: p["missing"]}, None, None, "defines"),
        (None, {"bytes": 4}, None, "smem_args"),
        (None, {"size": -1}, None, "smem_args"),
        (None, {"size": "x * 2.5"}, None, "smem_args"),
        (None, {"size": "y * 4"}, None, "smem_args"),
        (None, None, {"c": [1, 2]}, "cmem_args"),
        (None, None, {}, "cmem_args"),
    ],
)
def test_misuse_names_the_field(defines, smem, cmem, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        parse(defines, smem, cmem, {"x": 1}, fail)


def test_identity_changes_with_the_settings_and_is_empty_without_them():
    a = parse({"A": "x"}, None, None, {"x": 1}, fail).identity()
    b = parse({"A": "x + 1"}, None, None, {"x": 1}, fail).identity()
    assert a != b and "defines" in a
    assert parse(None, None, None, {"x": 1}, fail) is None


def test_defines_reach_the_compiler_per_configuration(tmp_path):
    """With ``defines`` the kernel gets exactly those (as in Kernel Tuner): MODE comes from a
    function of the configuration (1 does not compile) and STEP from an expression string."""
    spec = write_scale_spec(
        tmp_path,
        '{"S": [1, 2, 4], "M": [0, 2]}',
        extra="""
        defines = {"STEP": "S * 2", "MODE": lambda p: 1 if p["S"] == 4 else p["M"]}
    """,
    )
    cache = tmp_path / "out.h5"
    proc = mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(cache, "r") as f:
        res = f["results"][...]
    status = {(int(r["S"]), int(r["M"])): r["status"].decode() for r in res}
    assert status == {
        (1, 0): "ok",
        (2, 0): "ok",
        (1, 2): "verify_failed",
        (2, 2): "verify_failed",
        (4, 0): "compile_error",
        (4, 2): "compile_error",
    }
