"""``report FILE FILE ...``: one kernel tuned on several device models, a file for each, side by side.

It shows each model's best, and how it runs on the other models where they measured it. It also
shows the portable choice (offline/integration/choice.py, ``portable``). That is the one, among
the configurations every model measured, whose worst ratio to a model's best is smallest.

A user who runs one job per GPU model of a cluster gets the answer for each from its own file.
What this adds is whether one configuration would do for all. It also shows what each model's
own winner costs on the others; the usual practice is to use one model's winner everywhere. A
model's best is its confirmed winner where its file has a confirmation. Else it is its best
measured value. Ratios compare measured values only, each to the best value its model measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mpitune.errors import UserError
from mpitune.model.portable import portable, ratio
from mpitune.offline import confirmation
from mpitune.offline.exchange import as_written, config_of
from mpitune.offline.integration.choice import config_key
from mpitune.offline.integration.from_files import device_of
from mpitune.store.reader import CacheData, read


@dataclass(frozen=True)
class ModelBest:
    """One device model's file: its best, and that configuration's ratio to each model's best.

    A ratio is None where that model did not measure it, or it failed there."""

    device: str
    path: str
    config: dict[str, Any]
    value: float  # the objective's value: the confirmed median where confirmed
    confirmed: bool
    on_models: dict[str, float | None]

    @property
    def worst_ratio(self) -> float | None:
        """Its worst ratio over the models, where every model measured it; else None."""
        ratios = self.on_models.values()
        return None if any(r is None for r in ratios) else max(r for r in ratios if r is not None)


@dataclass(frozen=True)
class AcrossModels:
    """Several device models' files of one kernel, compared (module docstring)."""

    kernel_name: str
    objective: str
    higher_is_better: bool
    models: tuple[ModelBest, ...]
    portable_config: dict[str, Any] | None  # None where no configuration passed on every model
    portable_ratios: dict[str, float]
    portable_worst: float | None
    common: int  # configurations that passed on every model

    def usual_practice(self) -> ModelBest | None:
        """The model whose own winner, used on every model, has the least worst ratio: the usual
        practice the portable choice is set against. None where no winner was measured everywhere."""
        everywhere = [m for m in self.models if m.worst_ratio is not None]
        return min(everywhere, key=lambda m: m.worst_ratio or 0.0, default=None)


def compare(paths: Sequence[str]) -> AcrossModels:
    """The files at ``paths`` compared.

    Files of other kernels or parameters are refused in one line (``UserError``). So are two files of
    one device model, and a file measured on several models.

    Args:
        paths: mpitune files, one per device model.

    Returns:
        Each model's best and the portable choice.
    """
    datas = [read(path) for path in paths]
    first = datas[0]
    names = tuple(first.param_names)
    objective, higher = first.objective.name, first.objective.higher_is_better
    devices: dict[str, str] = {}
    values: dict[str, dict[str, float]] = {}
    configs: dict[str, dict[str, Any]] = {}
    bests: list[tuple[str, str, dict[str, Any], float, bool]] = []
    for path, data in zip(paths, datas):
        _refuse_other(path, data, paths[0], first)
        device = device_of(data, path)
        if device in devices:
            raise UserError(f"{path}: {device} again (also {devices[device]}); give one file of each device model")
        devices[device] = path
        written = as_written(data)
        mine: dict[str, float] = {}
        for row, value in zip(data.results, data.objective_values()[:, 0]):
            config = config_of(row, written)
            key = config_key(config, names)
            if math.isfinite(value) and key not in mine:  # a configuration's first measurement
                mine[key] = float(value)
                configs[key] = config
        if not mine:
            raise UserError(f"{path}: no configuration passed on {device}; nothing to compare")
        values[device] = mine
        verdict = confirmation.latest(data)[0]
        if verdict is not None:
            winner = {n: written[n].get(v, v) for n, v in verdict.winner.items()}
            bests.append((device, path, winner, verdict.winner_ms, True))
        else:
            key = (max if higher else min)(mine, key=lambda k: mine[k])
            bests.append((device, path, configs[key], mine[key], False))
    best_value = {d: (max if higher else min)(v.values()) for d, v in values.items()}
    models = tuple(
        ModelBest(device, path, config, value, done, _ratios(config_key(config, names), values, best_value, higher))
        for device, path, config, value, done in bests
    )
    found = portable(values, higher)
    return AcrossModels(
        first.problem.kernel_name,
        objective,
        higher,
        models,
        None if found is None else configs[found.key],
        {} if found is None else dict(found.ratios),
        None if found is None else found.worst_ratio,
        0 if found is None else found.common,
    )


def _refuse_other(path: str, data: CacheData, first_path: str, first: CacheData) -> None:
    """Files that are not of one kernel, its parameters and one objective do not compare."""
    kernel, theirs = data.problem.kernel_name, first.problem.kernel_name
    if kernel != theirs:
        raise UserError(f"{path}: kernel {kernel!r}, not {theirs!r} of {first_path}")
    if set(data.param_names) != set(first.param_names):
        mine, others = ", ".join(data.param_names), ", ".join(first.param_names)
        raise UserError(f"{path}: tunable parameters {mine}, not {others} of {first_path}")
    if data.objective.name != first.objective.name or data.objective.several:
        raise UserError(f"{path}: objective {data.objective.name!r}, not {first.objective.name!r} of {first_path}")


def _ratios(
    key: str, values: dict[str, dict[str, float]], best: dict[str, float], higher: bool
) -> dict[str, float | None]:
    return {d: (ratio(v[key], best[d], higher) if key in v else None) for d, v in values.items()}


def config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def render_across(paths: Sequence[str], as_json: bool = False) -> str:
    """``report`` of several files: text, or one JSON object (``as_json``)."""
    across = compare(paths)
    if as_json:
        return json.dumps(asdict(across), indent=1)
    devices = [m.device for m in across.models]
    unit = " ms" if across.objective == "time" else ""
    how = "best over value" if across.higher_is_better else "value over best"
    lines = [
        f"{across.kernel_name}: {len(devices)} device models, one file each; "
        f"ratios to each model's best {across.objective} ({how})",
        "",
        "each model's best, and how it runs on every model:",
    ]
    for m in across.models:
        how = "confirmed" if m.confirmed else "best measured"
        lines.append(f"  {m.device} ({m.path}): {m.value:.4g}{unit}, {how}: {config_text(m.config)}")
        lines.append("    " + "; ".join(f"on {d}: {_ratio_text(m.on_models[d])}" for d in devices))
    lines.append("")
    if across.portable_config is None:
        lines.append("portable choice: none (no configuration passed on every model)")
    else:
        each = "; ".join(f"on {d}: {across.portable_ratios[d]:.3f}" for d in devices)
        lines.append(
            f"portable choice (of {across.common} configurations that passed on every model): "
            f"{config_text(across.portable_config)}"
        )
        lines.append(f"  worst ratio {across.portable_worst:.3f}; {each}")
        usual = across.usual_practice()
        if usual is not None:
            lines.append(f"  the best model's own winner used everywhere: worst ratio {usual.worst_ratio:.3f}")
    return "\n".join(lines)


def _ratio_text(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"
