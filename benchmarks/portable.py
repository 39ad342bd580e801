"""The portable choice across GPU models (issue 40): for one kernel measured on several GPU models,
the configuration that is, at worst, closest to each model's best, against the usual practice of
taking one model's winner and using it everywhere.

    PYTHONPATH=. python benchmarks/portable.py [CACHE ...] [--validation] [--json PATH]

Clusters mix GPU models, and a kernel compiled once runs on all of them. Each Kernel Tuner cache
(``.json`` or ``.json.gz``, read by ``mpitune.store.measured.load``, as a replay reads it) is one
model. A configuration's ratio on a model is its time over that model's best time (1 for the best);
the **portable choice** is, among the configurations measured (status ok) on every model, the one
whose worst ratio is smallest: ``model.portable.portable``, the rule the header of device targets takes for
its default (docs/analysis.md), applied here to whole caches instead of a results file's blocks.
The **usual practice** is one model's own winner used everywhere: each model's winner is tried in
turn, with its ratio on every other model ("not measured" where that model lacks it), and the best
of them (the least worst ratio, among those measured on every model) is what it is compared with.
The portable choice's worst ratio is never above it: it is the least among every common
configuration, which includes each winner measured everywhere.

The default set is the shared convolution caches (../shared/data/caches, A100 and A4000);
``--validation`` adds ../shared/data/validation/convolution_*.json.gz (MI50, RTX 3060 laptop,
RTX 3090) and all five together. CACHE paths given replace the default set. Caches whose
parameters differ are matched on the parameters every one of them has, with each model's best
over the parameters only some have (a configuration there is the shared values, the rest tuned
per model), as ``--prior`` matches a prior (mpitune/model/prior.py); the table names them.

Each set prints a table of ratios (the portable choice, then each model's winner), the two side
by side, and the configurations; ``--json PATH`` writes the same figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpitune.errors import UserError
from mpitune.model.portable import portable, ratio
from mpitune.model.prior import usable
from mpitune.model.result import Status
from mpitune.offline.integration.choice import config_key
from mpitune.store import measured

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
CACHES = (SHARED / "caches" / "convolution_A100.json.gz", SHARED / "caches" / "convolution_A4000.json.gz")
VALIDATION = "convolution_*.json.gz"  # in SHARED / "validation"


@dataclass
class Model:
    """One cache: its valid times by configuration key (on the shared parameters), and for each key
    the whole configuration that gave it (the model's own parameters set to their best)."""

    label: str
    path: str
    device_name: str
    kernel_name: str
    problem_size: str
    measured: int  # configurations with a valid time
    own: dict[str, list[Any]]  # parameters the other caches lack, with this cache's values
    times: dict[str, float] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def best_ms(self) -> float:
        return min(self.times.values())

    def winner(self) -> str:
        """This model's best configuration; the first in the cache's order among equals."""
        return min(self.times, key=lambda k: self.times[k])


def labels(paths: list[str]) -> list[str]:
    """Short names: the file names without .json(.gz) and the prefix they all share up to an _
    (convolution_A100 and convolution_A4000: A100, A4000); the whole paths where they collide."""
    stems = [os.path.basename(p).removesuffix(".gz").removesuffix(".json") for p in paths]
    common = 0  # characters every stem begins with
    while len(stems) > 1 and all(len(s) > common and s[common] == stems[0][common] for s in stems):
        common += 1
    prefix = stems[0][:common][: stems[0][:common].rfind("_") + 1]
    short = [s[len(prefix) :] or s for s in stems]
    return short if len(set(short)) == len(short) else list(paths)


def load(paths: list[str]) -> tuple[list[Model], list[str]]:
    """Every cache as a Model, and the parameters they share (in the first cache's order)."""
    data = [measured.load(p) for p in paths]
    shared = [n for n in data[0].tune_params if all(n in d.tune_params for d in data)]
    if not shared:
        raise UserError("the caches share no tunable parameter: nothing to compare")
    models = []
    for label, path, d in zip(labels(paths), paths, data):
        names = list(d.tune_params)
        own = {n: v for n, v in d.tune_params.items() if n not in shared}
        size = "x".join(map(str, d.problem_size))
        model = Model(label, path, d.device_name, d.kernel_name, size, 0, own)
        for config, m in zip(d.configs, d.measurements):
            if m.status != Status.OK or not usable(m.time_ms):
                continue
            model.measured += 1
            params = dict(zip(names, config))
            key = config_key(params, shared)
            if m.time_ms < model.times.get(key, math.inf):
                model.times[key], model.configs[key] = m.time_ms, params
        if not model.times:
            raise UserError(f"{path}: no configuration with a valid time")
        models.append(model)
    return models, shared


def compare(name: str, models: list[Model], shared: list[str]) -> dict[str, Any]:
    """The set's figures: each model's best, the portable choice, each model's winner used
    everywhere, and the usual practice (the best of those winners)."""

    def ratios(key: str) -> dict[str, float | None]:
        return {m.label: ratio(m.times[key], m.best_ms, False) if key in m.times else None for m in models}

    def parameters(key: str) -> dict[str, Any]:
        return dict(zip(shared, json.loads(key)))

    found = portable({m.label: m.times for m in models}, higher_is_better=False)
    winners: list[dict[str, Any]] = []
    for model in models:
        key = model.winner()
        on = ratios(key)
        known = [r for r in on.values() if r is not None]
        worst = max(known) if len(known) == len(on) else None
        winners.append({"model": model.label, "parameters": parameters(key), "ratios": on, "worst_ratio": worst})
    everywhere = [w for w in winners if w["worst_ratio"] is not None]
    usual = min(everywhere, key=lambda w: w["worst_ratio"]) if everywhere else None
    return {
        "name": name,
        "kernels": sorted({m.kernel_name for m in models}),
        "problem_sizes": sorted({m.problem_size for m in models}),
        "shared_parameters": shared,
        "models": [
            {
                "label": m.label,
                "device_name": m.device_name,
                "path": m.path,
                "measured": m.measured,
                "best_ms": m.best_ms,
                "own_parameters": m.own,
            }
            for m in models
        ],
        "measured_on_every_model": found.common if found else 0,
        "portable": None
        if found is None
        else {
            "parameters": parameters(found.key),
            "ratios": found.ratios,
            "worst_ratio": found.worst_ratio,
            "configuration_per_model": {m.label: m.configs[found.key] for m in models},
        },
        "winners": winners,
        "usual_practice": None if usual is None else {"model": usual["model"], "worst_ratio": usual["worst_ratio"]},
    }


def _r(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def _config(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _varied(model: dict[str, Any]) -> list[str]:
    """The parameters of a model that the others lack and that take several values in it."""
    return [n for n, values in model["own_parameters"].items() if len(values) > 1]


def _own_parameters(models: list[dict[str, Any]]) -> list[str]:
    """A line on the parameters only some caches have: those of several values are set on each
    model to its best for the shared values; those of one value change nothing."""
    varied = [f"{m['label']}: {', '.join(_varied(m))}" for m in models if _varied(m)]
    fixed = sorted({n for m in models for n, values in m["own_parameters"].items() if len(values) == 1})
    if not varied and not fixed:
        return []
    line = "Parameters only some caches have: "
    if varied:
        line += f"set on each model to its best for the shared values ({'; '.join(varied)})"
    if fixed:
        line += ("; and " if varied else "") + f"of one value, so nothing to choose ({', '.join(fixed)})"
    return [line + "."]


def table(figures: dict[str, Any]) -> str:
    """The set's figures as markdown: the ratios, the two side by side, the configurations."""
    models = figures["models"]
    names = [m["label"] for m in models]
    kernels, sizes = ", ".join(figures["kernels"]), ", ".join(figures["problem_sizes"])
    lines = [f"## {figures['name']}: {kernels} at {sizes} on {', '.join(names)}", ""]
    counts = ", ".join(f"{m['label']} {m['measured']}" for m in models)
    lines.append(
        f"Configurations measured: {counts}; on every model: {figures['measured_on_every_model']}. "
        f"Matched on {len(figures['shared_parameters'])} parameters ({', '.join(figures['shared_parameters'])})."
    )
    lines += _own_parameters(models)
    lines += ["", f"| ratio to the model's best | {' | '.join(names)} | worst |", "|---" * (len(names) + 2) + "|"]
    best = " | ".join(f"{m['best_ms']:.4g}" for m in models)
    lines.append(f"| best time (ms) | {best} | |")
    chosen = figures["portable"]
    rows = [] if chosen is None else [("**portable choice**", chosen)]
    rows += [(f"{w['model']}'s winner", w) for w in figures["winners"]]
    for title, row in rows:
        cells = " | ".join(_r(row["ratios"][n]) for n in names)
        lines.append(f"| {title} | {cells} | {_r(row['worst_ratio'])} |")
    usual = figures["usual_practice"]
    lines.append("")
    if chosen is None:
        lines.append("No configuration was measured on every model: there is no portable choice.")
    if usual is not None and chosen is not None:
        winner = next(w for w in figures["winners"] if w["model"] == usual["model"])
        lines += [f"| | usual practice ({usual['model']}'s winner everywhere) | portable choice |", "|---|---|---|"]
        lines += [f"| on {n} | {_r(winner['ratios'][n])} | {_r(chosen['ratios'][n])} |" for n in names]
        lines += [f"| worst ratio | {_r(usual['worst_ratio'])} | {_r(chosen['worst_ratio'])} |", ""]
    elif usual is None:
        lines += ["No model's winner was measured on every model: the usual practice has no worst ratio.", ""]
    if chosen is not None:
        lines.append(f"- portable choice: {_config(chosen['parameters'])}")
        for m in models:
            tuned = {n: chosen["configuration_per_model"][m["label"]][n] for n in _varied(m)}
            lines += [f"  - on {m['label']}: {_config(tuned)}"] if tuned else []
    lines += [f"- {w['model']}'s winner: {_config(w['parameters'])}" for w in figures["winners"]]
    return "\n".join(lines) + "\n"


def sets(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(name, paths) of each set the arguments ask for."""
    first = ("given caches", list(args.caches)) if args.caches else ("caches", [str(p) for p in CACHES])
    out = [first]
    if args.validation:
        validation = sorted(str(p) for p in (SHARED / "validation").glob(VALIDATION))
        if not validation:
            raise UserError(f"no {VALIDATION} in {SHARED / 'validation'}")
        out += [("validation", validation), ("all together", first[1] + validation)]
    for name, paths in out:
        if len(paths) < 2:
            raise UserError(f"{name}: a portable choice needs caches of at least two models")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches", nargs="*", help="Kernel Tuner caches, one per GPU model (default: convolution's)")
    parser.add_argument("--validation", action="store_true", help="also the validation caches, and all together")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    try:
        found = []
        for name, paths in sets(args):
            models, shared = load(paths)
            found.append(compare(name, models, shared))
            print(table(found[-1]), flush=True)
    except UserError as exc:
        print(f"portable.py: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps({"sets": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
