"""``report FILE FILE ... --html OUT``: the comparison of several device models as one HTML page.

It shows what ``report FILE FILE ...`` prints (offline/across_models.py), as plain tables.
It needs no plotly and no script: the page is static, so it opens anywhere, offline.
Every text taken from a file is escaped: a device name is whatever the file says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from mpitune.offline.across_models import AcrossModels, compare, config_text
from mpitune.offline.html.assets import CSS
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import refuse_inputs

# The report's table headers sort; these do not. A ratio's shade says how far it is from 1.
EXTRA_CSS = """
th { cursor: default; }
th.text, td.text { text-align: left; }
td.best { background: #c7e9c0; font-weight: bold; }
td.na { color: #888; font-style: italic; }
tr.portable td { font-weight: bold; }
"""
FAR_RATIO = 4.0  # a ratio this far from 1, or further, gets the darkest shade


def write_across(paths: Sequence[str], out: str) -> str:
    """Write the page comparing the files at ``paths`` to ``out``, never over one of them.

    Args:
        paths: mpitune files of one kernel, one per device model.
        out: the HTML file to write (gzipped where it ends in .gz).

    Returns:
        ``out``.
    """
    refuse_inputs(out, *paths)  # first: a refusal needs nothing read
    page = across_html(compare(paths))
    with atomic_text(out) as fh:
        fh.write(page)
    return out


def across_html(across: AcrossModels) -> str:
    """The whole page of a comparison."""
    kernel = escape(across.kernel_name)
    direction = "higher is better" if across.higher_is_better else "lower is better"
    how = "best over value" if across.higher_is_better else "value over best"
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'  # no favicon request
        f"<title>mpitune: {kernel} on {len(across.models)} device models</title>\n"
        f"<style>{CSS}{EXTRA_CSS}</style>\n</head>\n<body>\n"
        f'<header id="summary">\n<h1>mpitune: {kernel} on {len(across.models)} device models</h1>\n<dl>\n'
        f"<dt>objective</dt><dd>{escape(across.objective)} ({direction})</dd>\n"
        f"<dt>ratios</dt><dd>to each model's best {escape(across.objective)} ({how}); 1 is that best</dd>\n"
        f"</dl>\n</header>\n<main>\n{_models_section(across)}{_portable_section(across)}</main>\n</body>\n</html>\n"
    )


def _models_section(across: AcrossModels) -> str:
    devices = [m.device for m in across.models]
    head = '<th class="text">device model</th><th class="text">file</th><th>best</th>'
    head += '<th class="text">how</th><th class="text">configuration</th>'
    head += "".join(f"<th>on {escape(d)}</th>" for d in devices)
    unit = " ms" if across.objective == "time" else ""
    rows = "".join(
        f'<tr data-device="{escape(m.device)}"><td class="text">{escape(m.device)}</td>'
        f'<td class="text">{escape(m.path)}</td><td>{m.value:.4g}{unit}</td>'
        f'<td class="text">{"confirmed" if m.confirmed else "best measured"}</td>'
        f'<td class="text">{escape(config_text(m.config))}</td>'
        + "".join(_ratio_cell(m.on_models[d]) for d in devices)
        + "</tr>\n"
        for m in across.models
    )
    return (
        '<section id="section-models">\n<h2>Each model\'s best, and how it runs on every model</h2>\n'
        '<p class="note">A row is a model\'s best configuration (confirmed where its file has a confirmation); '
        "a column is its ratio on a model. Green is that model's own best (1.000); the darker the red, the "
        "further from it. Not measured: that model has no passing result for it.</p>\n"
        f'<div class="table-wrap"><table id="models-table">\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{rows}</tbody>\n</table></div>\n</section>\n"
    )


def _portable_section(across: AcrossModels) -> str:
    if across.portable_config is None:
        body = '<p id="portable-none">none: no configuration passed on every model</p>\n'
    else:
        devices = [m.device for m in across.models]
        head = '<th class="text">choice</th><th class="text">configuration</th><th>worst ratio</th>'
        head += "".join(f"<th>on {escape(d)}</th>" for d in devices)
        rows = (
            f'<tr class="portable" id="portable-row"><td class="text">portable choice</td>'
            f'<td class="text">{escape(config_text(across.portable_config))}</td>{_ratio_cell(across.portable_worst)}'
            + "".join(_ratio_cell(across.portable_ratios.get(d)) for d in devices)
            + "</tr>\n"
        )
        usual = across.usual_practice()
        if usual is not None:
            rows += (
                f'<tr id="usual-row"><td class="text">{escape(usual.device)}\'s own winner used everywhere</td>'
                f'<td class="text">{escape(config_text(usual.config))}</td>{_ratio_cell(usual.worst_ratio)}'
                + "".join(_ratio_cell(usual.on_models[d]) for d in devices)
                + "</tr>\n"
            )
        body = (
            f'<p class="note" id="portable-note">Of the {across.common} configurations that passed on every '
            "model, the one whose worst ratio is smallest; below it, the best model's own winner used "
            "everywhere (the usual practice), where it was measured on every model.</p>\n"
            f'<div class="table-wrap"><table id="portable-table">\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{rows}</tbody>\n</table></div>\n"
        )
    return f'<section id="section-portable">\n<h2>Portable choice</h2>\n{body}</section>\n'


def _ratio_cell(value: float | None) -> str:
    """A ratio's cell: green at 1.000, else red, darker the further from 1; grey where not measured."""
    if value is None:
        return '<td class="na">not measured</td>'
    if round(value, 3) == 1.0:
        return f'<td class="best" data-ratio="{value!r}">1.000</td>'
    far = math.log(value) / math.log(FAR_RATIO) if value > 1 else 0.0  # nan, below 1: no shade
    alpha = 0.08 + 0.5 * min(1.0, far)
    return f'<td data-ratio="{value!r}" style="background: rgba(203, 24, 29, {alpha:.2f})">{value:.3f}</td>'
