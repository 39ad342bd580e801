"""``portable``, the rule behind the header's default and benchmarks/portable.py, on values worked
by hand, and ``default_choice`` still naming what it named before the rule was factored out."""

from __future__ import annotations

import pytest

from mpitune.model.portable import portable
from mpitune.offline.integration.choice import default_choice
from mpitune.offline.integration.results_file import Entry, ResultsFile

# Two blocks; w is only in B. Best: A 1.0, B 1.9.
# Worst ratios: x max(1, 4 / 1.9) = 2.105, y max(2, 2 / 1.9) = 2, z max(1.5, 2.2 / 1.9) = 1.5.
VALUES = {"A": {"x": 1.0, "y": 2.0, "z": 1.5}, "B": {"x": 4.0, "y": 2.0, "z": 2.2, "w": 1.9}}


def test_the_portable_choice_is_the_common_configuration_with_the_least_worst_ratio():
    found = portable(VALUES, higher_is_better=False)
    assert found is not None
    assert found.key == "z" and found.common == 3  # w is not in every block
    assert found.ratios == pytest.approx({"A": 1.5, "B": 2.2 / 1.9})
    assert found.worst_ratio == pytest.approx(1.5)


def test_higher_is_better_takes_the_best_over_the_value():
    # GFLOP/s: best A 4, B 8; x: max(1, 8 / 2) = 4, y: max(2, 1) = 2
    found = portable({"A": {"x": 4.0, "y": 2.0}, "B": {"x": 2.0, "y": 8.0}}, higher_is_better=True)
    assert found is not None and found.key == "y" and found.worst_ratio == pytest.approx(2.0)


def test_nothing_common_is_none_and_ties_go_to_the_first_block_order():
    assert portable({"A": {"x": 1.0}, "B": {"y": 1.0}}, higher_is_better=False) is None
    assert portable({}, higher_is_better=False) is None
    tied = portable({"A": {"y": 1.0, "x": 1.0}, "B": {"x": 2.0, "y": 2.0}}, higher_is_better=False)
    assert tied is not None and tied.key == "y" and tied.worst_ratio == 1.0


def test_default_choice_over_a_results_file_is_the_portable_rule():
    def entry(device: str, step: int, time: float) -> Entry:
        return Entry(device, "1024", {"STEP": step}, time)

    # gpu_a: best 1 (STEP 1); gpu_b: best 1 (STEP 4), where STEP 1 is 3 and STEP 2 is 1.2 (kept
    # twice, the better counts); STEP 4 is not kept for gpu_a.
    entries = [entry("gpu_a", 1, 1.0), entry("gpu_a", 2, 1.1), entry("gpu_b", 4, 1.0)]
    entries += [entry("gpu_b", 1, 3.0), entry("gpu_b", 2, 1.5), entry("gpu_b", 2, 1.2)]
    results = ResultsFile("k", ("STEP",), "time", False, tuple(entries))
    choice = default_choice(results)
    assert choice.params == {"STEP": 2} and choice.worst_ratio == pytest.approx(1.2)
    assert (choice.common, choice.blocks) == (2, 2)
    # ties go to the configuration the file names first, whichever block it is in
    # (STEP 1 and 2 tie at 1; gpu_a's block names 2 before 1, the file names 1 first)
    tied = [entry("gpu_a", 3, 1.0), entry("gpu_b", 1, 1.0), entry("gpu_a", 2, 1.0), entry("gpu_a", 1, 1.0)]
    tied += [entry("gpu_b", 2, 1.0), entry("gpu_b", 3, 5.0)]
    assert default_choice(ResultsFile("k", ("STEP",), "time", False, tuple(tied))).params == {"STEP": 1}
    none_common = ResultsFile("k", ("STEP",), "time", False, (entry("gpu_a", 1, 1.0), entry("gpu_b", 2, 1.0)))
    assert default_choice(none_common).worst_ratio is None
