"""Kernel Tuner's names: a spec's module-level names are ``tune_kernel``'s arguments, so a
Kernel Tuner script ports by copying. What each name defaults to, and which are refused or
ignored, is decided here once."""

from __future__ import annotations

from typing import Any

# Entries of ``strategy_options`` that are the search's budget rather than the strategy's own options.
BUDGET_OPTIONS = ("max_fevals", "time_limit", "seed")
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
    "strategy": None,
    "strategy_options": None,
    "cache": None,
    "simulation_mode": False,
    "timeout_s": None,
    "compile_workers": None,
    "metrics": None,
    "objective_higher_is_better": None,  # False for every objective
    "defines": None,
    "smem_args": None,
    "cmem_args": None,
    "observers": None,
    "seed": None,
    # mpitune's own: stop timing clearly slower configurations early (docs/spec.md).
    "racing": True,
    # mpitune's own: time the best candidates again once the search ends (docs/spec.md).
    "confirm": True,
    # mpitune's own: compare the ranks' devices during the search, and when to flag one (docs/spec.md).
    "calibrate": True,
    "device_margin": 0.02,
    # mpitune's own: how rank 0 hands out work on several ranks, a Schedule's value (docs/spec.md).
    "schedule": "auto",
    # mpitune's own: measurements made elsewhere that the search starts from (docs/strategies.md).
    "prior": None,
    "prior_any_kernel": False,
}
# Every name a spec may set; others close to one of these are taken for misspellings.
KNOWN = tuple(DEFAULTS) + UNSUPPORTED + IGNORED
