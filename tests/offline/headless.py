"""A real headless Chromium for the HTML report's tests, driven by Playwright.

Debian's ``chromium`` and ``pip install playwright`` (CI installs both); the tests skip, saying
which is missing, elsewhere. ``MPITUNE_SCREENSHOTS=DIR`` makes the tests save what they saw
there (docs/img holds the ones the documentation shows).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Watched:
    """What a page did while it was open: console errors, uncaught exceptions and every request."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def browser_or_skip():
    """A started Chromium (the caller closes it and its Playwright)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs chromium: apt-get install chromium")
    pw = sync_api.sync_playwright().start()
    try:
        return pw, pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    except Exception:
        pw.stop()
        raise


def started_browser():
    """A Chromium for a module's tests, closed after them. A module takes it as its fixture:
    ``browser = pytest.fixture(scope="module", name="browser")(started_browser)``."""
    pw, chromium = browser_or_skip()
    yield chromium
    chromium.close()
    pw.stop()


def open_page(browser, url: str) -> tuple:
    """A page at ``url`` with what it logs and requests recorded, once every chart is drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    seen = Watched()
    page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.errors.append(str(e)))
    page.on("request", lambda r: seen.requests.append(r.url))
    page.goto(url)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=30_000)
    return page, seen


def points(page) -> int:
    """Configurations drawn as points in the convergence chart's first panel (SVG markers)."""
    return page.evaluate("""() => {
        const gd = document.getElementById('convergence');
        const k = gd.data.findIndex(t => t.meta === 'points');
        return gd.querySelectorAll('.scatterlayer .trace')[k].querySelectorAll('path.point').length;
    }""")


def screenshot(page, name: str) -> None:
    folder = os.environ.get("MPITUNE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)
