"""The HTML report in a real headless Chromium: of a real tuning run (C backend, 3 ranks, a
higher-is-better objective, started from a prior), of an imported Kernel Tuner cache and of a
replay. The page must load from its file alone, draw what the file holds and agree with ``report``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env, mpitune, report_json, scale_prior, write_scale_spec
from headless import open_page, points, screenshot, started_browser

pytest.importorskip("pandas")
pytest.importorskip("plotly")

# GB/s of y = 2 * x: a metric to maximise, so the best so far is a running maximum.
BANDWIDTH = """
metrics = {"GB/s": lambda p: 8 * n / 1e6 / p["time"]}
objective = "GB/s"
objective_higher_is_better = True
prior = ["prior.json"]
"""
# STEP 1, 2, 4 and 16 are in the prior (conftest's scale_prior) and in the space: with each MODE, 12.
MATCHED = 12


browser = pytest.fixture(scope="module", name="browser")(started_browser)


def verb(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "mpitune", *args], env=mpi_env(), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def html_report(cache: Path) -> Path:
    out = cache.with_suffix(".html")
    assert verb("report", str(cache), "--html", str(out)).stdout.strip() == str(out)
    return out


def opened(browser, page_file: Path):
    page, seen = open_page(browser, page_file.as_uri())
    assert seen.errors == []
    assert set(seen.requests) == {page_file.as_uri()}  # everything it needs is inside the file
    return page


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    scale_prior(tmp / "prior.json")
    spec = write_scale_spec(tmp, '{"STEP": [1, 2, 4, 8, 16, 32], "MODE": [0, 1, 2]}', extra=BANDWIDTH)
    proc = mpitune(3, [str(spec), "--cache", str(tmp / "out.h5")], tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out.h5"


def test_report_of_a_real_run_shows_every_configuration_and_rank(browser, tuned):
    summary = report_json(tuned)
    page = opened(browser, html_report(tuned))
    assert int(page.get_attribute("#configs", "data-count")) == summary["configs"] == 18
    assert points(page) == summary["ok"] == 6  # MODE 1 does not compile, MODE 2 gives wrong answers
    assert float(page.get_attribute("#best", "data-value")) == pytest.approx(summary["best"]["objective"])
    assert "GB/s (higher is better)" in page.inner_text("#summary")
    [prior] = summary["prior"]  # shown as report says it, beside the runs
    shown = page.locator("#summary dd.prior")
    assert int(shown.get_attribute("data-matched")) == prior["matched"] == MATCHED
    assert shown.inner_text() == (
        f"{prior['path']}: kernel scale on Other CPU, problem size [4096]; {MATCHED} configurations matched on STEP"
    )
    # The best so far only rises, and ends at the best (_fullData: the traces as drawn, arrays decoded).
    best = page.evaluate("""() => document.getElementById('convergence')._fullData
                              .filter(t => (t.name || '').startsWith('best so far') && t.xaxis === 'x2')
                              .flatMap(t => Array.from(t.y))""")
    assert best == sorted(best) and best[-1] == pytest.approx(summary["best"]["objective"])

    ticks = page.eval_on_selector_all("#timeline .yaxislayer-above .ytick text", "els => els.map(e => e.textContent)")
    assert sorted(ticks) == ["rank 0", "rank 1", "rank 2"]
    assert page.locator("#timeline .barlayer .point").count() >= 3 * 4  # start-up, compile, ..., waits
    failures = page.evaluate(
        "() => { const t = document.getElementById('failures')._fullData[0]; return [t.x, Array.from(t.y)]; }"
    )
    assert dict(zip(*failures)) == {"ok": 6, **summary["failed"]}

    rows = page.locator("#top-table tbody tr")
    assert rows.count() == 6
    assert float(rows.first.locator("td").nth(1).inner_text()) == pytest.approx(summary["best"]["objective"], rel=1e-3)
    page.click("#top-table th:text-is('STEP')")
    steps = page.eval_on_selector_all("#top-table tbody tr td:nth-child(4)", "els => els.map(e => +e.textContent)")
    assert steps == [1, 2, 4, 8, 16, 32]

    # The mouse over a point (plotly's drag layer above it takes the events, as in a person's browser).
    page.locator("#convergence .scatterlayer .trace").first.locator("path.point").first.hover(force=True)
    hover = page.locator("#convergence .hoverlayer .hovertext").first
    hover.wait_for(timeout=5_000)
    text = hover.text_content()
    assert "STEP=" in text and "MODE=0" in text and "status ok, 3 iterations" in text and "rank " in text
    screenshot(page, "html-report.png")
    page.close()


def test_the_payload_holds_each_prior_as_report_json_does(tuned):
    """Without a browser: the page's data, field by field, is what ``report --json`` says."""
    from mpitune.offline.html.payload import build_from_file

    priors = build_from_file(str(tuned))["summary"]["priors"]
    assert priors == report_json(tuned)["prior"]
    assert [(p["run"], p["path"], p["matched"]) for p in priors] == [(0, str(tuned.parent / "prior.json"), MATCHED)]


def test_report_of_an_imported_cache_and_of_a_replay(browser, tmp_path, pnpoly):
    imported = tmp_path / "pnpoly.h5"
    verb("import", str(pnpoly), "--out", str(imported))
    replayed = tmp_path / "replay.h5"
    verb("replay", str(pnpoly), "--strategy", "random_sample", "--max-fevals", "300", "--output", str(replayed))
    for cache, source in ((imported, "imported from"), (replayed, "replay (random_sample)")):
        summary = report_json(cache)
        page = opened(browser, html_report(cache))
        assert source in page.inner_text("#summary")
        assert int(page.get_attribute("#configs", "data-count")) == summary["configs"]
        drawn = page.evaluate("""() => document.getElementById('convergence')._fullData
                                   .find(t => t.meta === 'points').x.length""")
        assert drawn == summary["ok"]
        assert float(page.get_attribute("#best", "data-value")) == pytest.approx(summary["best"]["objective"])
        assert page.locator("#timeline .barlayer .point").count() > 0
        # The replay ended by its budget and confirmed its best; an import has nothing confirmed.
        if summary["confirmation"] is None:
            assert page.locator("#confirmed").count() == 0 and cache == imported
        else:
            confirmed = page.inner_text("#confirmed")
            winner = summary["confirmation"]["winner"]
            assert f"{summary['confirmation']['winner_ms']:.4g} ms [" in confirmed
            assert ", ".join(f"{k}={v}" for k, v in winner.items()) in confirmed
        page.close()
    assert report_json(replayed)["confirmation"] is not None
