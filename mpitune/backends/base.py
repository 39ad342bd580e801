"""What the scheduler needs from a backend, and helpers every backend shares."""

from __future__ import annotations

import numpy as np

from ..result import Result
from ..timeline import Timeline


class Backend:
    """One device, owned by one rank.

    ``prepare`` runs once per run (upload arguments, find the device); ``run`` compiles,
    warms up, verifies and times one configuration and never raises for a bad
    configuration: failures come back as a ``Result`` status. Work is recorded as phases
    on the timeline it is given, which also fills ``compile_s``/``verify_s``/``benchmark_s``.
    """

    device_name: str = "unknown"  # the model: part of what defines a problem's results
    device_detail: str = ""  # which device exactly (index, PCI bus, UUID), for the record
    # Set when the device can no longer be trusted (a lost CUDA context): the scheduler then
    # stops giving this rank work and ends the run, rather than record garbage.
    fatal_error: str = ""

    def prepare(self) -> None:
        pass

    def run(self, config_id: int, config: dict, timeline: Timeline) -> Result:
        raise NotImplementedError

    def close(self) -> None:
        pass


def shorten(text: str, max_lines: int = 12, max_chars: int = 2000) -> str:
    """Keep the head of a compiler log: the first errors are the ones that explain."""
    lines = text.strip().splitlines()
    short = "\n".join(lines[:max_lines])
    if len(lines) > max_lines:
        short += f"\n... ({len(lines) - max_lines} more lines)"
    return short[:max_chars]


def mismatch(outputs: list, answer: list | None, atol: float) -> str:
    """Empty when every checked output matches its answer within ``atol``, else why not."""
    if answer is None:
        return ""
    for i, (got, expected) in enumerate(zip(outputs, answer)):
        if expected is None:
            continue
        got, expected = np.asarray(got), np.asarray(expected)
        diff = np.abs(np.subtract(got, expected, dtype=np.result_type(got, expected, np.float64)))
        bad = ~(diff <= atol)  # NaN counts as wrong
        if bad.any():
            worst = np.nanmax(diff) if not np.isnan(diff).all() else float("nan")
            return (f"argument {i}: {int(bad.sum())} of {bad.size} values differ by more than "
                    f"atol={atol:g} (largest difference {worst:g})")
    return ""


def median_ms(times_ms: list[float]) -> float:
    return float(np.median(times_ms)) if times_ms else float("nan")
