"""The kernel cache in front of NVRTC: its key everywhere, and on a real GPU (tests that take
``cp``, marked gpu) cached cubins loaded from memory, through the compile workers and whole runs.

An entry that is not written again (its inode unchanged) was loaded, not compiled: a compile
that missed writes its entry anew."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env, mpiexec
from test_cupy import forms

from mpitune.backends.cupy import create
from mpitune.backends.cupy.compiling import NvrtcCompiler
from mpitune.backends.kernel_cache import CACHE_VARIABLE, CachedCompiler, decode
from mpitune.model.kernel_extras import Derived
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.process.compile_ahead import CompileAhead

SOURCE = 'extern "C" __global__ void scale(float *y) { y[threadIdx.x] *= FACTOR; }'


def nvrtc(**changed) -> NvrtcCompiler:
    fields = {
        "source": SOURCE,
        "kernel_name": "scale",
        "options": ("-arch=sm_90", "-ftz=true"),
        "image": "cubin",
        "problem_size": (256,),
        "grid_div": {"x": None, "y": None, "z": None},
        "block_size_names": ("block_size_x", "block_size_y", "block_size_z"),
        "constants": (),
    }
    return NvrtcCompiler(**{**fields, **changed})


def test_every_input_of_nvrtc_is_in_the_key():
    """No GPU needed: the key is what NVRTC would be given."""
    work = Work(0, {"block_size_x": 64, "FACTOR": 2})
    base = nvrtc().cache_key(work)
    assert base is not None
    variants = [
        nvrtc(options=("-arch=sm_80", "-ftz=true")).cache_key(work),
        nvrtc(options=("-arch=sm_90",)).cache_key(work),
        nvrtc(image="ptx").cache_key(work),
        nvrtc(source=SOURCE.replace("*=", "+=")).cache_key(work),
        nvrtc(kernel_name="other").cache_key(work),
        nvrtc(constants=("coeff",)).cache_key(work),
        nvrtc().cache_key(Work(0, {"block_size_x": 64, "FACTOR": 3})),  # a define
        nvrtc().cache_key(Work(0, {"block_size_x": 128, "FACTOR": 2})),  # block_size_x, a define too
        nvrtc().cache_key(Work(0, {"block_size_x": 64, "FACTOR": 2}, Derived({"FACTOR": "2"}, 0))),  # spec's defines
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert nvrtc().cache_key(Work(5, {"block_size_x": 64, "FACTOR": 2})) == base  # the id is no part of it
    assert nvrtc(grid_div={"x": "1 / 0", "y": None, "z": None}).cache_key(work) is None  # nothing to compile


CONFIGS = [{"block_size_x": b, "tile": t} for b in (128, 256) for t in (1, 4)]
DERIVED = [Derived({"SMEM_FLOATS": str(c["block_size_x"])}, c["block_size_x"] * 4) for c in CONFIGS]
WORK = [Work(i, c, d) for i, (c, d) in enumerate(zip(CONFIGS, DERIVED))]


def measured(tmp_path: Path, name: str) -> tuple[list, dict[str, int]]:
    """A new backend runs every configuration of ``WORK`` (templates, constant memory, dynamic
    shared memory): their statuses and the cache's entries after."""
    work = tmp_path / name
    work.mkdir()
    backend = create(forms(), str(work), 0)
    backend.prepare()
    try:
        assert isinstance(backend.compiler(), CachedCompiler)
        statuses = [backend.run(w, Timeline()).status for w in WORK]
    finally:
        backend.close()
    return statuses, {p.name: p.stat().st_ino for p in (tmp_path / "kernels").rglob("*.kernel")}


@pytest.mark.gpu
def test_a_new_backend_loads_cached_cubins_and_they_verify(cp, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "kernels"))
    first, entries = measured(tmp_path, "first")
    assert first == ["ok"] * 4 and len(entries) == 4
    again, after = measured(tmp_path, "again")
    assert again == ["ok"] * 4
    assert after == entries  # none written again: each was loaded from the cache


@pytest.mark.gpu
def test_a_damaged_cubin_is_compiled_again_and_replaced(cp, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "kernels"))
    _, before = measured(tmp_path, "first")
    paths = sorted((tmp_path / "kernels").rglob("*.kernel"))
    good = [p.read_bytes() for p in paths]
    for path, data in zip(paths, good):
        path.write_bytes(data[: len(data) - 7])  # truncated: the cubin's end is lost
    statuses, after = measured(tmp_path, "again")
    assert statuses == ["ok"] * 4
    assert after.keys() == before.keys() and all(after[k] != before[k] for k in before)  # each written again
    assert [p.read_bytes() for p in paths] == good  # whole
    assert all(decode(p.stem, p.read_bytes()).entry for p in paths)


@pytest.mark.gpu
def test_what_compile_workers_compiled_is_cached_for_the_next_run(cp, tmp_path, monkeypatch):
    """The compiler travels to the workers with the cache in front of it: they fill it."""
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "kernels"))
    (tmp_path / "first").mkdir()
    backend = create(forms(), str(tmp_path / "first"), 0)
    backend.prepare()
    ahead = CompileAhead(2, Clock(), backend.compiler())
    try:
        ahead.submit(WORK)
        compiled = [ahead.take(w, 120) for w in WORK]
        statuses = [backend.run(w, Timeline(), k).status for w, k in zip(WORK, compiled)]
    finally:
        ahead.close()
        backend.close()
    assert statuses == ["ok"] * 4
    entries = {p.name: p.stat().st_ino for p in (tmp_path / "kernels").rglob("*.kernel")}
    assert len(entries) == 4
    again, after = measured(tmp_path, "again")
    assert again == ["ok"] * 4 and after == entries


SPEC = '''
import numpy as np
n = 1 << 20
x = np.arange(n, dtype=np.float32)
lang = "cupy"
kernel_name = "scale"
kernel_source = """
extern "C" __global__ void scale(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR * x[i];
}
"""
problem_size = n
arguments = [np.zeros(n, np.float32), x, np.int32(n)]
answer = [2 * x, None, None]
tune_params = {"block_size_x": [64, 128, 256, 512, 1024], "FACTOR": [2]}
'''


@pytest.mark.gpu
def test_a_second_run_with_another_strategy_compiles_nothing_on_the_gpu(cp, tmp_path):
    (tmp_path / "spec.py").write_text(SPEC)
    kernels = tmp_path / "kernels"
    env = {**mpi_env(), CACHE_VARIABLE: str(kernels)}

    def tune(*args: str) -> None:
        cmd = [*mpiexec(), "-n", "1", sys.executable, "-m", "mpitune", "spec.py", *args]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr

    tune("--out", "first.h5")
    entries = {p.name: p.stat().st_ino for p in kernels.rglob("*.kernel")}
    assert len(entries) == 5
    tune("--out", "second.h5", "--strategy", "random_sample", "--confirm", "3")
    assert {p.name: p.stat().st_ino for p in kernels.rglob("*.kernel")} == entries


@pytest.mark.gpu
def test_the_key_names_nvrtc_the_driver_and_the_architecture(cp, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "kernels"))
    backend = create(forms(), str(tmp_path), 0)
    try:
        compiler = backend.compiler()
        assert isinstance(compiler, CachedCompiler)
        capability = cp.cuda.Device(backend.device_id).compute_capability
        driver = cp.cuda.runtime.driverGetVersion()
        assert compiler.identity.startswith("NVRTC ") and f"driver {driver}" in compiler.identity
        assert f"sm_{capability}" in compiler.identity and cp.__version__ in compiler.identity
    finally:
        backend.close()
