"""A problem's large arrays reach the worker in a memory file: same values, same layout, the
worker's writes its own; small arrays and those a file cannot hold stay in the pickle."""

from __future__ import annotations

import os

import numpy as np
from conftest import write_scale_spec

from mpitune.model.problem import Kernel
from mpitune.model.timeline import Clock, Timeline
from mpitune.model.work import Work
from mpitune.process import shared_arrays
from mpitune.process.isolation import IsolatedBackend
from mpitune.process.shared_arrays import SharedArray, attach_arrays, share
from mpitune.spec.load import load_spec


def problem_of(arguments: list, answer: list | None) -> Kernel:
    return Kernel("spec.py", "k", "k.c", "C", (1,), arguments, answer, 0.0, {"X": [1]})


def test_large_arrays_keep_values_and_layout_and_writes_stay_private():
    c_order = np.arange(1 << 19, dtype=np.float32)  # 2 MB
    fortran = np.asfortranarray(np.arange(512 * 300, dtype=np.float64).reshape(512, 300))  # 1.2 MB
    small = np.ones(10, np.float32)
    strided = np.arange(1 << 20, dtype=np.float32)[::2]  # 2 MB, not contiguous
    objects = np.array([object()] * (1 << 18))  # 2 MB of references
    record = np.zeros(1 << 17, dtype=[("a", np.int32), ("b", np.float64)])  # 1.5 MB of records
    answer = [2 * c_order, None]
    problem = problem_of([c_order, fortran, small, strided, objects, np.int32(3), record], answer)

    slim, shared = share(problem)
    assert shared is not None
    kinds = [type(a).__name__ for a in slim.arguments]
    assert kinds == ["SharedArray", "SharedArray", "ndarray", "ndarray", "ndarray", "int32", "SharedArray"]
    assert isinstance(slim.answer[0], SharedArray) and slim.answer[1] is None
    assert slim.arguments[2] is small and slim.arguments[3] is strided  # in the pickle as they were
    offsets = [a.offset for a in [*slim.arguments, *slim.answer] if isinstance(a, SharedArray)]
    assert all(offset % shared_arrays.ALIGN_BYTES == 0 for offset in offsets)
    assert shared.size >= sum(a.nbytes for a in (c_order, fortran, record, answer[0]))

    first = attach_arrays(slim, os.dup(shared.fd), shared.size)
    second = attach_arrays(slim, os.dup(shared.fd), shared.size)
    shared.close()
    got = first.arguments
    np.testing.assert_array_equal(got[0], c_order)
    np.testing.assert_array_equal(got[1], fortran)
    assert got[1].flags.f_contiguous and not got[1].flags.c_contiguous
    assert got[6].dtype == record.dtype
    np.testing.assert_array_equal(first.answer[0], answer[0])
    got[0][:] = -1  # a backend writing its outputs
    np.testing.assert_array_equal(second.arguments[0], c_order)  # each mapping is its own
    np.testing.assert_array_equal(c_order, np.arange(1 << 19, dtype=np.float32))  # the rank's too


def test_nothing_is_shared_when_every_array_is_small():
    problem = problem_of([np.zeros(16, np.float32)], None)
    assert share(problem) == (problem, None)


def test_a_worker_measures_arguments_it_got_through_shared_memory(tmp_path):
    spec = write_scale_spec(tmp_path, tune_params='{"STEP": [1, 4], "MODE": [0, 2]}')
    spec.write_text(spec.read_text().replace("n = 4096", "n = 1 << 20"))  # 4 MB per array
    problem = load_spec(str(spec))[0].kernel
    assert share(problem)[1] is not None  # this problem does take the memory file
    clock = Clock()
    backend = IsolatedBackend(problem, str(tmp_path), clock, local_rank=0)
    try:
        timeline = Timeline(clock)
        right = backend.run(Work(0, {"STEP": 4, "MODE": 0}), timeline)
        wrong = backend.run(Work(1, {"STEP": 1, "MODE": 2}), timeline)
        assert right.status == "ok", right.error
        assert wrong.status == "verify_failed", wrong.error  # the answer came through the file too
    finally:
        backend.close()
    assert not problem.arguments[0].any()  # the worker's outputs were its own pages
