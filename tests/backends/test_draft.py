"""A backend's ``Draft`` is a ``Result`` in the making: each of its fields is the result's field
of that name, with the same default, and ``result()`` carries every one over by name."""

from __future__ import annotations

import dataclasses
import math

from mpitune.backends.base import Draft
from mpitune.model.result import Result, Status


def test_every_field_of_a_draft_is_a_field_of_the_result_with_its_default():
    results = {f.name: f for f in dataclasses.fields(Result)}
    for f in dataclasses.fields(Draft):
        assert f.name in results, f"Draft.{f.name} is no field of Result"
        mine, theirs = Draft(0), Result(0, Status.OK)
        drafted, resulted = getattr(mine, f.name), getattr(theirs, f.name)
        if isinstance(drafted, float) and math.isnan(drafted):
            assert math.isnan(resulted), f.name
        else:
            assert type(drafted)(resulted) == drafted, f.name  # a list's default is the tuple's


def test_a_result_carries_every_field_of_its_draft():
    draft = Draft(7)
    draft.compile_s, draft.verify_s, draft.benchmark_s, draft.first_ms = 0.5, 0.25, 1.5, 3.0
    draft.set_times([2.0, 1.0, 3.0], raced=True)
    draft.throttled, draft.observed = "power", {"energy_j": 4.0}
    draft.fail(Status.VERIFY_FAILED, "mismatch")
    result = draft.result()
    for f in dataclasses.fields(Draft):
        value = getattr(draft, f.name)
        assert getattr(result, f.name) == (tuple(value) if isinstance(value, list) else value), f.name
    assert result.times_ms == (2.0, 1.0, 3.0) and result.time_ms == 2.0
    draft.times_ms.append(9.0)
    draft.observed["power_w"] = 1.0
    assert result.times_ms == (2.0, 1.0, 3.0) and result.observed == {"energy_j": 4.0}  # copies, not shared
