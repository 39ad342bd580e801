"""Kernel Tuner's names. A spec's module-level names are ``tune_kernel``'s arguments. So a Kernel
Tuner script ports by copying. What each name defaults to is decided here once. So is which names
are refused or ignored."""

from __future__ import annotations

from typing import Any

from mpitune.spec.settings_table import SPEC_DEFAULTS

# Kernel Tuner arguments that mpitune does not implement: refused loudly rather than ignored.
UNSUPPORTED = ("texmem_args", "verify", "device", "platform", "compiler", "parallel", "objectives")
# Kernel Tuner arguments that are accepted and have no effect here.
IGNORED = ("verbose", "quiet", "log")
DEFAULTS: dict[str, Any] = {
    "kernel_name": None,
    "kernel_source": None,
    "problem_size": None,
    "arguments": None,
    "tune_params": None,
    "restrictions": None,
    "grid_div_x": None,
    "grid_div_y": None,
    "grid_div_z": None,
    "block_size_names": None,
    "answer": None,
    "atol": 1e-6,
    "iterations": 7,
    "objective": "time",
    "compiler_options": None,
    # Kernel Tuner's default language is CUDA: here the CUDA backend, by the name it records.
    "lang": "cupy",
    "simulation_mode": False,
    "timeout_s": None,
    "metrics": None,
    "objective_higher_is_better": None,  # False for every objective
    "defines": None,
    "smem_args": None,
    "cmem_args": None,
    "observers": None,
    # The run settings' names (settings_table.py): mpitune's own, Kernel Tuner's strategy and cache.
    **SPEC_DEFAULTS,
}
# Every name a spec may set; others close to one of these are taken for misspellings.
KNOWN = tuple(DEFAULTS) + UNSUPPORTED + IGNORED
