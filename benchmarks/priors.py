"""The shared pairs of caches that issue 30 measures priors on, and the prior each target gets
from the other cache of its pair: measured elsewhere (another GPU), loaded with
``measured.load`` and put on the target's ids with ``model.prior.align``, as a run given
``--prior`` does.

Used by ``benchmarks/strategies.py --prior`` and by the tests that replay the pairs.
"""

from __future__ import annotations

import os

import numpy as np

from mpitune.model.prior import NothingShared, Prior, PriorSource, align
from mpitune.model.searchspace import SearchSpace
from mpitune.store import measured

# Each pair is measured in both directions; the paths are relative to the shared data folder.
PAIRS = (
    ("caches/convolution_A100", "caches/convolution_A4000"),
    ("validation/convolution_RTX_3090", "validation/convolution_RTX_3060_laptop"),
    ("validation/convolution_RTX_3090", "validation/convolution_MI50"),
    ("caches/gemm_RTX_3090", "validation/gemm_RTX_3060_laptop"),
    ("caches/pnpoly_RTX_3090", "validation/pnpoly_RTX_3060_laptop"),
)


def directed(pairs: tuple[tuple[str, str], ...] = PAIRS) -> list[tuple[str, str]]:
    """(prior, target) for each pair, both ways."""
    return [way for a, b in pairs for way in ((a, b), (b, a))]


def cache_path(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, name + ".json.gz")


def load_prior(path: str, space: SearchSpace) -> Prior:
    """The prior a run on ``space`` gets from the cache at ``path``: its valid times on the
    parameters both share. Raise ``NothingShared`` where they share nothing."""
    data = measured.load(path)
    times = [m.time_ms if m.status == "ok" else np.nan for m in data.measurements]
    shared, time_ms = align(space, data.tune_params, data.configs, times)
    source = PriorSource(
        path,
        data.kernel_name,
        data.device_name,
        str(data.problem_size),
        shared,
        int(np.isfinite(time_ms).sum()),
    )
    return Prior((source,), (time_ms,))


def reversed_prior(time_ms: np.ndarray) -> Prior:
    """A prior that misleads: the given times with their order reversed (the best last)."""
    flipped = np.where(np.isfinite(time_ms), 1.0 / time_ms, np.nan)
    source = PriorSource("reversed", "", "", "", (), int(np.isfinite(flipped).sum()))
    return Prior((source,), (flipped,))


__all__ = ["PAIRS", "NothingShared", "cache_path", "directed", "load_prior", "reversed_prior"]
