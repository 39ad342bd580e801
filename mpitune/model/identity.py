"""What defines a tuning problem: the record a results file keeps of it, and its hash.

The record is the file's JSON attribute ``problem``; the hash is ``problem_hash``. So a run
resumes only on results of the same problem.

The JSON is part of the file format (docs/cache-format.md). A file written by any earlier version
must hash the same when its problem is tuned again. Else a resume would see a different problem.
So each field keeps its JSON name and form. The fields a problem does not have are left out of
the JSON, not written empty. An imported Kernel Tuner cache records no launch settings. A file
written before observers has no ``observed_names``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ProblemIdentity:
    """Everything that, when it changes, invalidates measured results.

    Metrics and the objective are not in it: they are derived from what was measured."""

    kernel_name: str
    kernel_source: str
    lang: str
    problem_size: tuple[Any, ...]
    arguments: tuple[str, ...]  # each argument's dtype and shape: "<f4[4096]"
    tune_params: Mapping[str, tuple[Any, ...]]
    restrictions: tuple[str, ...]  # each one's text: the expression, or a function's source
    iterations: int
    # How mpitune launches the kernel; None in an imported Kernel Tuner cache, which records none.
    grid_div: Mapping[str, str | tuple[str, ...] | None] | None = None
    block_size_names: tuple[str, ...] | None = None
    compiler_options: tuple[str, ...] | None = None
    replay_source: str | None = None  # the measured data a replay answers from ("" when tuned)
    # Kernel Tuner's per-configuration settings (model/kernel_extras.py), where the spec has them.
    defines: Mapping[str, str] | None = None
    smem_args: str | None = None
    cmem_args: Mapping[str, str] | None = None
    # The values observed beside time (NVML power, a Kernel Tuner cache's GFLOP/s).
    observed_names: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None  # the device models the run measured on
    # A biased replay's simulated devices (model/problem.py): the factors given, or the spread
    # they are drawn with. Not the seed: replays of one spread with other seeds are the same
    # problem on other devices of one model, whose runs a file may hold side by side.
    device_bias: tuple[float, ...] | None = None
    device_bias_sd: float | None = None
    imported_from: str | None = None  # the Kernel Tuner cache's file name, for an import

    def record(self) -> dict[str, Any]:
        """As the file holds it, parsed: lists and dicts, every key in sorted order.

        The fields a problem lacks are left out. This is the pandas tables' ``attrs["problem"]``."""
        record: dict[str, Any] = json.loads(self.to_json())
        return record

    def to_json(self) -> str:
        """The file's attribute ``problem``."""
        return json.dumps(self._plain(), sort_keys=True)

    def _plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kernel_name": self.kernel_name,
            "kernel_source": self.kernel_source,
            "lang": self.lang,
            "problem_size": list(self.problem_size),
            "arguments": list(self.arguments),
            "tune_params": {k: list(v) for k, v in self.tune_params.items()},
            "restrictions": list(self.restrictions),
            "iterations": self.iterations,
        }
        optional: dict[str, Any] = {
            "grid_div": None if self.grid_div is None else {k: _listed(v) for k, v in self.grid_div.items()},
            "block_size_names": _listed(self.block_size_names),
            "compiler_options": _listed(self.compiler_options),
            "replay_source": self.replay_source,
            "defines": None if self.defines is None else dict(self.defines),
            "smem_args": self.smem_args,
            "cmem_args": None if self.cmem_args is None else dict(self.cmem_args),
            "devices": _listed(self.devices),
            "device_bias": _listed(self.device_bias),
            "device_bias_sd": self.device_bias_sd,
            "imported_from": self.imported_from,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        if self.observed_names:
            out["observed_names"] = list(self.observed_names)
        return out

    def digest(self) -> str:
        """The file's attribute ``problem_hash``: SHA-256 of ``to_json``."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def differing(self, recorded_json: str) -> list[str]:
        """The names of the fields in which a file's ``problem`` attribute differs from this one.

        Fields only one of them has are included."""
        stored, mine = json.loads(recorded_json), self.record()
        return sorted(k for k in set(stored) | set(mine) if stored.get(k) != mine.get(k))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ProblemIdentity:
        """From the JSON form: ``record``, or a file's attribute parsed.

        A field the record lacks takes its empty value. Names this version does not know are
        passed over."""
        lacking = [f.name for f in fields(cls) if f.default is None]  # the fields a problem may lack
        optional = {k: record[k] for k in lacking if record.get(k) is not None}
        for name in ("block_size_names", "compiler_options", "devices", "device_bias"):
            if name in optional:
                optional[name] = tuple(optional[name])
        if "grid_div" in optional:
            optional["grid_div"] = {k: _tupled(v) for k, v in optional["grid_div"].items()}
        return cls(
            kernel_name=str(record.get("kernel_name", "")),
            kernel_source=str(record.get("kernel_source", "")),
            lang=str(record.get("lang", "")),
            problem_size=tuple(record.get("problem_size", ())),
            arguments=tuple(record.get("arguments", ())),
            tune_params={k: tuple(v) for k, v in record.get("tune_params", {}).items()},
            restrictions=tuple(record.get("restrictions", ())),
            iterations=int(record.get("iterations", 0)),
            observed_names=tuple(record.get("observed_names", ())),
            **optional,
        )

    @classmethod
    def from_json(cls, text: str) -> ProblemIdentity:
        """From a file's attribute ``problem``."""
        return cls.from_record(json.loads(text))


def _listed(value: Sequence[Any] | str | None) -> Any:
    """A sequence as a JSON list; text and None as they are."""
    return value if value is None or isinstance(value, str) else list(value)


def _tupled(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else tuple(value)
