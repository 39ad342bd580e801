"""The HTML page: plotly.js, the style, the payload and the script, in one file.

Everything the page needs is inside it; plotly.js comes from the installed plotly package.
So a report opens offline, from a cluster's disk or an e-mail attachment alike.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

from mpitune.errors import UserError
from mpitune.offline.html.assets import CSS, SCRIPT
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import refuse_inputs


@dataclass(frozen=True)
class Live:
    """How a live page refreshes: the endpoint it asks and how often."""

    endpoint: str = "data.json"
    interval_s: float = 5.0


def plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise UserError(
            "the HTML report needs plotly: pip install plotly (in a checkout: pip install -e '.[analysis]')"
        ) from None
    return str(get_plotlyjs())


def _embedded(text: str) -> str:
    """JSON that a <script> element holds safely: no "</" can close it early."""
    return text.replace("</", "<\\/")


def page_html(payload_json: str, title: str, live: Live | None = None) -> str:
    """The whole page for a payload already encoded as JSON (payload.to_json)."""
    live_json = json.dumps(
        asdict(live) if live else None, allow_nan=False
    )  # NaN is no JSON: the page could not read it
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'  # no favicon request
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n"
        f"<script>{plotly_js()}</script>\n</head>\n<body>\n"
        '<header id="summary"></header>\n<div id="live-status"></div>\n<main id="report"></main>\n'
        f'<script type="application/json" id="payload">{_embedded(payload_json)}</script>\n'
        f'<script type="application/json" id="live">{live_json}</script>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def write_report(cache: str, out: str) -> str:
    """Write the self-contained report of ``cache`` to ``out`` (never over ``cache`` itself);
    returns ``out``."""
    refuse_inputs(out, cache)  # first: a refusal needs nothing loaded
    from mpitune.offline.html.payload import build_from_file, to_json

    plotly_js()  # say what to install before reading a large file
    payload = build_from_file(cache)
    page = page_html(to_json(payload), f"mpitune: {payload['summary']['kernel']}")
    with atomic_text(out) as fh:
        fh.write(page)
    return out
