"""A problem against its backend's declared capabilities: each refusal names the spec's field."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from conftest import write_scale_spec

from mpitune import backends
from mpitune.errors import SpecError
from mpitune.model.problem import Kernel
from mpitune.spec import fit
from mpitune.spec.load import load_spec

NO_DIV = {"x": None, "y": None, "z": None}


def fail(field: str, message: str):
    raise SpecError("spec.py", field, message)


def cuda_problem(
    kernel_name: str = "vadd",
    arguments: list | None = None,
    answer: list | None = None,
    tune_params: dict | None = None,
    **kw,
) -> Kernel:
    a = np.ones(16, np.float32)
    return Kernel(
        spec_path="spec.py",
        kernel_name=kernel_name,
        kernel_source="__global__ void vadd() {}",
        lang="cupy",
        problem_size=(16,),
        arguments=arguments or [np.zeros_like(a), a, np.int32(16)],
        answer=answer,
        atol=1e-6,
        tune_params=tune_params or {"block_size_x": [32, 64]},
        grid_div=kw.pop("grid_div", dict(NO_DIV)),
        **kw,
    )


def refusal(p: Kernel) -> SpecError | None:
    caps = backends.capabilities(p.lang)
    try:
        fit.kernel_name_fits(p.kernel_name, caps, fail)
        fit.problem(p, caps, fail)
    except SpecError as exc:
        return exc
    return None


def test_a_good_gpu_problem_fits_without_importing_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # any import of cupy now fails
    assert refusal(cuda_problem()) is None
    assert refusal(cuda_problem(grid_div={"x": "block_size_x * 2", "y": None, "z": None})) is None
    assert refusal(cuda_problem("ns::vadd_t<float, 64>")) is None


@pytest.mark.parametrize(
    "kw, field, match",
    [
        ({"kernel_name": "two words"}, "kernel_name", "C[+][+] function name"),
        ({"kernel_name": "9lives"}, "kernel_name", "template instance"),
        ({"tune_params": {"block_size_x": [0, 32]}}, "tune_params", "positive integers"),
        ({"tune_params": {"block_size_x": [32.0]}}, "tune_params", "positive integers"),
        ({"grid_div": {"x": "block_size_x * nope", "y": None, "z": None}}, "grid_div_x", "nope"),
        ({"grid_div": {"x": None, "y": "block_size_x *", "z": None}}, "grid_div_y", "does not parse"),
        ({"grid_div": {"x": None, "y": None, "z": "__import__('os')"}}, "grid_div_z", "calls something other"),
        (
            {
                "answer": [np.zeros(16, np.complex64), None, None],
                "arguments": [np.zeros(16, np.complex64), np.ones(16, np.float32), np.int32(16)],
            },
            "answer",
            "complex",
        ),
    ],
)
def test_what_the_gpu_cannot_run_is_refused_by_its_field(kw, field, match):
    exc = refusal(cuda_problem(**kw))
    assert exc is not None and exc.field == field
    assert re.search(match, str(exc)), str(exc)


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is double here")
def test_long_double_has_no_cuda_type():
    p = cuda_problem()
    p.arguments[0] = np.zeros(4, np.longdouble)
    exc = refusal(p)
    assert exc is not None and exc.field == "arguments" and "has no" in str(exc)


def test_the_c_backend_refuses_scalars_it_cannot_pass_by_value(tmp_path):
    problem, _ = load_spec(str(write_scale_spec(tmp_path)))
    problem.kernel.arguments[2] = np.complex64(1)
    exc = refusal(problem.kernel)
    assert exc is not None and exc.field == "arguments" and "argument 2" in str(exc)


@pytest.mark.parametrize("text, lang", [("cupy", "cupy"), ("CUDA", "cupy"), ("c", "C"), ("C", "C")])
def test_lang_names_and_kernel_tuner_aliases_resolve(text, lang):
    assert fit.language(text, fail).lang == lang


@pytest.mark.parametrize("text", ["replay", "opencl", 3, None])
def test_other_langs_are_refused_naming_the_choices(text):
    with pytest.raises(SpecError, match="must be one of C, cupy") as info:
        fit.language(text, fail)
    assert info.value.field == "lang"


def test_device_memory_needs_a_backend_that_has_it():
    c = backends.capabilities("C")
    with pytest.raises(SpecError, match="use lang='cupy'") as info:
        fit.memory({"smem_args": {"size": 64}}, c, fail)
    assert info.value.field == "smem_args"
    fit.memory({"smem_args": {"size": 64}, "cmem_args": {"k": 1}}, backends.capabilities("cupy"), fail)


def test_device_tunables_and_observers_need_a_backend_that_runs_them():
    from mpitune.observers import NVMLObserver

    c = backends.capabilities("C")
    with pytest.raises(SpecError, match="nvml_gr_clock") as info:
        fit.observers(None, {"nvml_gr_clock": [1000]}, c, fail)
    assert info.value.field == "tune_params"
    with pytest.raises(SpecError, match="runs no observers") as info:
        fit.observers([NVMLObserver()], {}, c, fail)
    assert info.value.field == "observers"
    gpu = backends.capabilities("cupy")
    assert len(fit.observers([NVMLObserver()], {"nvml_gr_clock": [1000]}, gpu, fail)) == 1
    with pytest.raises(SpecError, match="takes one NVMLObserver"):
        fit.observers([NVMLObserver(), NVMLObserver()], {}, gpu, fail)
    with pytest.raises(SpecError, match="must be a list holding one NVMLObserver"):
        fit.observers(["power"], {}, gpu, fail)
