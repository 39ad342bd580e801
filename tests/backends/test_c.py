"""The C backend, compiling real kernels with gcc."""

import math
from dataclasses import replace

import numpy as np
import pytest
from conftest import write_scale_spec

from mpitune.backends import c as cbackend
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work
from mpitune.spec.load import load_spec


@pytest.fixture
def backend(tmp_path):
    problem, _ = load_spec(str(write_scale_spec(tmp_path)))
    work = tmp_path / "work"
    work.mkdir()
    b = cbackend.create(problem.kernel, str(work), 0)
    b.prepare()
    return b


def test_ok_configuration_is_verified_and_timed(backend):
    timeline = Timeline()
    r = backend.run(Work(3, {"STEP": 4, "MODE": 0}), timeline)
    assert r.status == "ok", r.error
    assert len(r.times_ms) == 3 and all(t > 0 for t in r.times_ms)
    assert r.time_ms == pytest.approx(float(np.median(r.times_ms)))
    assert r.compile_s > 0 and r.verify_s > 0 and r.benchmark_s > 0
    assert [p.phase for p in timeline.rows if p.phase != "other"] == ["compile", "verify", "benchmark"]
    assert {p.config_id for p in timeline.rows if p.phase != "other"} == {3}


def test_compile_error_keeps_the_compiler_log(backend):
    r = backend.run(Work(0, {"STEP": 4, "MODE": 1}), Timeline())
    assert r.status == "compile_error"
    assert "does not compile" in r.error and math.isnan(r.time_ms)


def test_wrong_answer_is_verify_failed_and_not_benchmarked(backend):
    r = backend.run(Work(0, {"STEP": 4, "MODE": 2}), Timeline())
    assert r.status == "verify_failed" and "differ" in r.error
    assert r.times_ms == () and r.benchmark_s == 0


def test_output_left_by_a_previous_configuration_cannot_pass(backend):
    """A kernel that writes nothing must fail even right after a correct one."""
    assert backend.run(Work(0, {"STEP": 1, "MODE": 0}), Timeline()).status == "ok"
    backend.problem = replace(backend.problem, kernel_source="void scale(float *y, const float *x, int n) {}")
    backend.prepare()
    assert backend.run(Work(1, {"STEP": 1, "MODE": 0}), Timeline()).status == "verify_failed"


def test_missing_symbol_is_a_compile_error(backend):
    backend.problem = replace(backend.problem, kernel_name="not_there")
    r = backend.run(Work(0, {"STEP": 1, "MODE": 0}), Timeline())
    assert r.status == "compile_error" and "not_there" in r.error
