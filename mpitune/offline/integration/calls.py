"""Kernel Tuner's integration calls (``kernel_tuner.integration``, 1.5.0) with its signatures.

They are ``store_results``, ``TuneResults`` with ``get_best_config``, and ``create_device_targets``.
They work on Kernel Tuner's results file (results_file.py). So a script using them ports by
changing its import, and either tool reads the other's file.

Where they differ from Kernel Tuner's, it is to take what Kernel Tuner's do not. They take results
from either tool with failures among them. Kernel Tuner's ``store_results`` compares a failure's
``"CompilationFailedConfig"`` with the times and raises ``TypeError``. They take mpitune's
confirmed winner. And ``get_best_config`` returns the configuration's parameters in every case.
Kernel Tuner's returns the whole entry, parameters inside it, for a device and problem size it
has.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from mpitune.offline.integration import results_file as rf
from mpitune.offline.integration.choice import best_config, confirmed_entry, kept_entries
from mpitune.offline.integration.header import header_text
from mpitune.offline.integration.results_file import ResultsFile, ResultsFileError
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import refuse_inputs

log = logging.getLogger(__name__)

# Kernel Tuner's directions of the objectives it knows (kernel_tuner.util.objective_default_map).
KNOWN_DIRECTIONS = {
    "time": False,
    "energy": False,
    "fitness": True,
    "cost": False,
    "loss": False,
    "GFLOP/s": True,
    "TFLOP/s": True,
    "GB/s": True,
    "TB/s": True,
    "GFLOPS/W": True,
    "TFLOPS/W": True,
    "GFLOP/J": True,
    "TFLOP/J": True,
}


def objective_defaults(objective: str | None, higher_is_better: bool | None) -> tuple[str, bool]:
    """Time by default; a known objective's direction where none is given (as Kernel Tuner)."""
    objective = objective or "time"
    if higher_is_better is None:
        if objective not in KNOWN_DIRECTIONS:
            raise ResultsFileError(f"give objective_higher_is_better for the objective {objective!r}")
        higher_is_better = KNOWN_DIRECTIONS[objective]
    return objective, bool(higher_is_better)


def store_results(
    results_filename: str,
    kernel_name: str,
    kernel_string: Any,
    tune_params: Mapping[str, Sequence[Any]],
    problem_size: Any,
    results: Sequence[Mapping[str, Any]],
    env: Mapping[str, Any],
    top: float = 3,
    objective: str | None = None,
    objective_higher_is_better: bool | None = None,
) -> None:
    """Keep the best configurations of one tuning run in a results file.

    They are for the device of ``env["device_name"]`` and ``problem_size``. The file's entries for
    that device and problem size are replaced, its others kept. Failed configurations are passed
    over: a marker instead of a number, a ``status`` other than ``ok``, Kernel Tuner's ``__error__``.

    Args:
        results_filename: the JSON file to write, or to add to when it exists (same kernel,
            tunable parameters and objective).
        kernel_name: the kernel's name.
        kernel_string: its source, or the name of its file; recorded in a new file.
        tune_params: the tunable parameters (their names are what is kept of each configuration).
        problem_size: the problem size tuned (a number, or a sequence of them).
        results: ``tune_kernel``'s results, from mpitune or Kernel Tuner.
        env: ``tune_kernel``'s env; mpitune's ``confirmation`` in it is used where present.
        top: configurations within this percentage of the best value are kept; where ``env``
            holds a confirmation (objective time), its winner alone, with its confirmed median,
            and the configurations tied with it in ``mpitune_tied``.
        objective: the value to rank by (default ``time``).
        objective_higher_is_better: its direction (default: known for Kernel Tuner's objectives).

    Returns:
        None; the file is written whole or not at all.
    """
    objective, higher = objective_defaults(objective, objective_higher_is_better)
    names = tuple(tune_params)
    device = env.get("device_name")
    if not isinstance(device, str) or not device.strip():
        raise ResultsFileError("store_results: env has no device_name")
    block = (rf.device_label(device), rf.size_label(problem_size))
    source = os.path.basename(str(env.get("cache") or ""))
    entries = confirmed_entry(env, names, objective, higher, block, source) or kept_entries(
        results, names, objective, higher, top, block, source
    )
    if os.path.isfile(results_filename):
        old = rf.read_results_file(results_filename)
        _refuse_mismatch(old, results_filename, kernel_name, names, objective, higher)
        kept = tuple(e for e in old.entries if e.block != block)
        new = ResultsFile(
            old.kernel_name, old.tunable_parameters, old.objective, old.higher_is_better, kept + entries,
            old.kernel_string, old.other,
        )  # fmt: skip
    else:
        new = ResultsFile(kernel_name, names, objective, higher, entries, _source_text(kernel_string))
    rf.write(results_filename, new)
    log.info("%s: %d configuration(s) for %s at problem size %s", results_filename, len(entries), *block)


def _refuse_mismatch(
    old: ResultsFile, path: str, kernel_name: str, names: tuple[str, ...], objective: str, higher: bool
) -> None:
    if old.kernel_name != kernel_name:
        raise ResultsFileError(f"{path}: holds kernel {old.kernel_name!r}, not {kernel_name!r}")
    if set(old.tunable_parameters) != set(names):
        raise ResultsFileError(
            f"{path}: its tunable parameters are {', '.join(old.tunable_parameters)}, not {', '.join(names)}"
        )
    if (old.objective, old.higher_is_better) != (objective, higher):
        raise ResultsFileError(f"{path}: ranks by {old.objective!r}, not {objective!r} in that direction")


def _source_text(kernel_string: Any) -> str:
    """The kernel's source, read where it names a file (as Kernel Tuner records it)."""
    if not isinstance(kernel_string, str):
        return ""
    if os.path.isfile(kernel_string):
        with open(kernel_string, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    return kernel_string


class TuneResults:
    """A results file, read: Kernel Tuner's or mpitune's.

    ``data`` holds its entries as the file does, ``meta`` the rest. ``objective`` and
    ``objective_higher_is_better`` say how it ranks."""

    def __init__(self, results_filename: str):
        """Args:
        results_filename: the results file; a ``ValueError`` (``ResultsFileError``) when it is
            missing, damaged or holds no entries.
        """
        if not os.path.isfile(results_filename):
            raise ResultsFileError(f"{results_filename}: no such results file")
        self.results = rf.read_results_file(results_filename)
        if not self.results.entries:
            raise ResultsFileError(f"{results_filename}: holds no entries")
        doc = rf.document(self.results)
        self.data: list[dict[str, Any]] = doc.pop("data")
        self.meta: dict[str, Any] = doc
        self.objective = self.results.objective
        self.objective_higher_is_better = self.results.higher_is_better

    def get_best_config(self, gpu_name: str = "default", problem_size: Any = None) -> dict[str, Any]:
        """The configuration for a device and problem size, by Kernel Tuner's rules (choice.py).

        Args:
            gpu_name: the device's name, as ``env["device_name"]`` gives it or as the file keeps it.
                For a device the file lacks, a configuration good across all of its entries.
            problem_size: the size (a number, sequence or ``"AxB"``); without it, or for a size
                the file lacks for the device, a configuration good across the device's sizes.

        Returns:
            The tunable parameters of the configuration, by name.
        """
        return best_config(self.results, gpu_name, problem_size)


def create_device_targets(
    header_filename: str,
    results_filename: str,
    objective: str | None = None,
    objective_higher_is_better: bool | None = None,
) -> None:
    """Write a header with each device's configuration from a results file (header.py).

    Compile with ``-DTARGET_<device>`` for a device's configuration, with none for the default.

    Args:
        header_filename: the header to write (replaced whole where it exists).
        results_filename: the results file, Kernel Tuner's or mpitune's.
        objective: if given, must be the file's (a file ranks by one objective).
        objective_higher_is_better: if given, must be the file's direction.

    Returns:
        None.
    """
    results = TuneResults(results_filename).results
    if objective is not None and objective != results.objective:
        raise ResultsFileError(f"{results_filename}: ranks by {results.objective!r}, not {objective!r}")
    if objective_higher_is_better is not None and bool(objective_higher_is_better) != results.higher_is_better:
        raise ResultsFileError(f"{results_filename}: its objective's direction is the other one")
    refuse_inputs(header_filename, results_filename)
    try:
        text = header_text(results)
    except ResultsFileError as exc:
        raise ResultsFileError(f"{results_filename}: {exc}") from None
    with atomic_text(header_filename) as fh:
        fh.write(text)
