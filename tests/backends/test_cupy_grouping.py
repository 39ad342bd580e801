"""Several configurations in one NVRTC program (backends/cupy/geometry.py ``grouped_code``,
compiling.py ``NvrtcCompiler.many``). The program's text is checked everywhere; compiling needs
NVRTC (CuPy's binding and NVRTC's library; no GPU), and is skipped where they are missing (CI)."""

from __future__ import annotations

import itertools

import pytest

from mpitune.backends.cupy.compiling import NvrtcCompiler
from mpitune.backends.cupy.geometry import GROUP_VARIABLE, group_max, groupable, grouped_code
from mpitune.backends.kernel_cache import CachedCompiler, KernelCache
from mpitune.errors import UserError
from mpitune.model.result import Status
from mpitune.model.timeline import Clock
from mpitune.model.work import Work
from mpitune.process.compile_ahead import CompileAhead

SOURCE = """
#define TILE (block_size_x * 2)
__device__ float twice(float v) { return 2.0f * v; }
extern "C" __global__ void scale(float *y, const float *x) {
#if block_size_x == 96
#error "no 96"
#endif
    int i = blockIdx.x * TILE + threadIdx.x;
    y[i] = twice(x[i]) + TILE;
}
"""


def test_each_copy_has_its_namespace_its_kernel_name_and_only_its_own_defines():
    code, names = grouped_code(SOURCE, "scale", [{"block_size_x": "32"}, {"block_size_x": "64"}])
    assert names == ["mpitune_0::scale_mpitune_0", "mpitune_1::scale_mpitune_1"]
    first, second = code.split("#undef scale\n")[:2]
    assert "#define block_size_x 32" in first and "#define block_size_x 64" not in first
    assert "#define block_size_x 64" in second and "#define scale scale_mpitune_1" in second
    assert "namespace mpitune_0 {\n#line 1\n" in first and "#undef block_size_x" in first
    assert code.count(SOURCE) == 2


def test_only_self_contained_kernels_are_grouped():
    assert groupable(SOURCE, "scale", ())
    assert not groupable('#include "tile.h"\n' + SOURCE, "scale", ())  # a guard would hide it
    assert not groupable("#pragma once\n" + SOURCE, "scale", ())
    assert not groupable(SOURCE, "scale", ("filter",))  # constant memory the run fills
    assert not groupable(SOURCE, "scale<float, tile>", ())  # a template instance


def test_the_group_size_comes_from_the_environment_or_is_refused_in_one_line():
    assert group_max({}) == 4 and group_max({GROUP_VARIABLE: "1"}) == 1
    for bad in ("0", "2.5", "many", "-3"):
        with pytest.raises(UserError, match=GROUP_VARIABLE):
            group_max({GROUP_VARIABLE: bad})


def nvrtc_or_skip() -> None:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # no CuPy, or no NVRTC library: nothing to compile with
        pytest.skip(f"needs CuPy's NVRTC: {type(exc).__name__}")


def compiler(group: int) -> NvrtcCompiler:
    return NvrtcCompiler(SOURCE, "scale", ("-arch=compute_90",), "ptx", (1024,), {}, ("block_size_x",), (), group)


def works(*sizes: int) -> list[Work]:
    return [Work(i, {"block_size_x": s}) for i, s in enumerate(sizes)]


def test_a_group_compiles_as_one_program_with_each_kernel_named_and_its_share_of_the_time():
    nvrtc_or_skip()
    compiled = compiler(4).many(works(32, 64, 128, 256, 512))
    assert [c.status for c in compiled] == [None] * 5
    assert [c.entry for c in compiled] == [f"scale_mpitune_{k}" for k in range(4)] + ["scale"]  # the fifth alone
    assert len({c.artifact for c in compiled[:4]}) == 1 and compiled[4].artifact != compiled[0].artifact
    ptx = compiled[0].artifact.decode()
    assert all(f".entry scale_mpitune_{k}(" in ptx for k in range(4))
    for earlier, later in itertools.pairwise(compiled[:4]):  # shares of one program, in turn
        assert earlier.finished == pytest.approx(later.started) and earlier.compile_s > 0


def test_a_program_that_fails_is_compiled_one_by_one_so_each_gets_its_own_status():
    nvrtc_or_skip()
    compiled = compiler(4).many(works(32, 96, 128))
    assert [c.status for c in compiled] == [None, Status.COMPILE_ERROR, None]
    assert "no 96" in compiled[1].error
    assert [c.entry for c in compiled if c.status is None] == ["scale", "scale"]  # alone: its own name


def test_one_at_a_time_or_one_configuration_compiles_alone():
    nvrtc_or_skip()
    alone = compiler(1).many(works(32, 64))
    assert [c.entry for c in alone] == ["scale", "scale"] and alone[0].artifact != alone[1].artifact
    assert compiler(4).many(works(32))[0].entry == "scale"


def test_the_kernel_cache_files_each_member_of_a_program_under_its_own_key(tmp_path):
    nvrtc_or_skip()
    cached = CachedCompiler(compiler(4), KernelCache(str(tmp_path)), "NVRTC under test")
    first = cached.many(works(32, 64, 128))
    again = cached.many(works(32, 64, 128))
    assert [c.entry for c in again] == [c.entry for c in first] == [f"scale_mpitune_{k}" for k in range(3)]
    assert [c.artifact for c in again] == [c.artifact for c in first]
    one = CachedCompiler(compiler(1), KernelCache(str(tmp_path)), "NVRTC under test")(Work(1, {"block_size_x": 64}))
    assert one.entry == "scale_mpitune_1" and one.artifact == first[1].artifact  # loaded, not compiled again


def test_compile_workers_hand_out_groups_and_each_configuration_comes_back():
    """Seven configurations on two workers go in tasks of four at most, the first alone; a bad
    one in a program costs only itself."""
    nvrtc_or_skip()
    ahead = CompileAhead(2, Clock(), compiler(4))
    try:
        ahead.submit(works(32, 64, 96, 128, 160, 192, 224))
        done = [ahead.take(work, 120) for work in works(32, 64, 96, 128, 160, 192, 224)]
    finally:
        ahead.close()
    assert [c.status for c in done] == [None, None, Status.COMPILE_ERROR, None, None, None, None]
    assert done[0].entry == "scale" and any(c.entry.startswith("scale_mpitune_") for c in done[3:])
