"""``report FILE FILE ... --html OUT``: the comparison of several device models as a page
(offline/html/across.py), of real HDF5 files imported from Kernel Tuner caches written here, read
as written and as a real headless Chromium renders it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from headless import screenshot, started_browser
from test_across_models import A, B, kt_file, report

from mpitune.offline.kt_import import import_kt

# A third model. Passed on A, B and C: (1,1), (1,2), (2,1); worst ratios 2.222, 4.0 and 1.667.
C = {(1, 1): 1.25, (1, 2): 1.0, (2, 1): 1.5, (2, 2): 1.1, (3, 1): 2.0}
D = {(2, 2): 1.0, (3, 1): 1.0}  # nothing that B passed: no portable choice for B and D
EVIL = "GPU <script>alert(1)</script> & 'co'"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("models_html")
    out = {}
    for name, device, times in (("a", "GPU A", A), ("b", "GPU B", B), ("c", "GPU C", C), ("d", "GPU D", D)):
        import_kt(str(kt_file(tmp / f"{name}.json", device, times)), str(tmp / f"{name}.h5"))
        out[name] = tmp / f"{name}.h5"
    import_kt(str(kt_file(tmp / "evil.json", EVIL, B)), str(tmp / "evil.h5"))
    out["evil"] = tmp / "evil.h5"
    return out


def html_of(*paths: Path, out: Path) -> str:
    proc = report(*paths, "--html", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    return out.read_text()


def test_the_page_shows_each_model_its_ratios_and_the_portable_choice(files, tmp_path):
    page = html_of(files["a"], files["b"], files["c"], out=tmp_path / "abc.html")
    got = json.loads(report(files["a"], files["b"], files["c"], "--json").stdout)
    assert got["portable_config"] == {"x": 2, "y": 1} and got["common"] == 3  # the page says what --json says
    for model in got["models"]:
        assert f'<tr data-device="{model["device"]}">' in page and f'<td class="text">{model["path"]}</td>' in page
    assert "<th>on GPU A</th><th>on GPU B</th><th>on GPU C</th>" in page
    # A's winner (3,1): 1.000 on A, not measured on B, 2.0 / 1.0 on C.
    assert (
        '<td class="text">x=3, y=1</td><td class="best" data-ratio="1.0">1.000</td>'
        '<td class="na">not measured</td><td data-ratio="2.0"' in page
    )
    assert '0.9 ms</td><td class="text">best measured</td>' in page
    assert page.count('class="best"') == 4  # each model's winner on itself, and B's winner in the usual row
    assert "Of the 3 configurations that passed on every model" in page
    portable = page.split('id="portable-row">')[1].split("</tr>")[0]
    assert (
        "x=2, y=1" in portable and ">1.667</td>" in portable and ">1.200</td>" in portable and ">1.500</td>" in portable
    )
    # The usual practice: B's winner (1,1), worst 2.222 on A (C's winner is 4.0 on B).
    usual = page.split('id="usual-row">')[1].split("</tr>")[0]
    assert "GPU B's own winner used everywhere" in usual and "x=1, y=1" in usual and ">2.222</td>" in usual
    assert "<script" not in page and "http" not in page  # static, nothing fetched


def test_no_portable_choice_is_said_in_one_line(files, tmp_path):
    page = html_of(files["b"], files["d"], out=tmp_path / "bd.html")
    assert '<p id="portable-none">none: no configuration passed on every model</p>' in page
    assert "portable-row" not in page and "usual-row" not in page


def test_every_text_from_a_file_is_escaped(files, tmp_path):
    page = html_of(files["a"], files["evil"], out=tmp_path / "evil.html")
    assert "<script" not in page and "alert(1)</script>" not in page
    assert "GPU &lt;script&gt;alert(1)&lt;/script&gt; &amp; &#x27;co&#x27;" in page


def test_html_onto_an_input_file_is_refused_in_one_line(files):
    before = files["a"].read_bytes()
    proc = report(files["a"], files["b"], "--html", files["b"])
    assert proc.returncode == 2 and f"{files['b']} is the input {files['b']}" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
    assert files["a"].read_bytes() == before and report(files["b"]).returncode == 0  # both inputs untouched


browser = pytest.fixture(scope="module", name="browser")(started_browser)


def test_the_page_in_a_real_browser_shows_the_tables(browser, files, tmp_path):
    out = tmp_path / "four.html"
    html_of(files["a"], files["b"], files["c"], files["evil"], out=out)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: errors.append("dialog: " + d.message))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    page.wait_for_selector("#models-table")
    screenshot(page, "html-across-models.png")
    assert errors == [] and requests == [out.as_uri()]  # no script ran, nothing fetched
    assert page.inner_text("h1") == "mpitune: k on 4 device models"
    header = [th.inner_text() for th in page.locator("#models-table thead th").all()]
    assert header[5:] == ["on GPU A", "on GPU B", "on GPU C", f"on {EVIL}"]
    rows = [[td.inner_text() for td in tr.locator("td").all()] for tr in page.locator("#models-table tbody tr").all()]
    assert [r[0] for r in rows] == ["GPU A", "GPU B", "GPU C", EVIL]  # the name shown as it is, not run
    assert rows[0][2:] == ["0.9 ms", "best measured", "x=3, y=1", "1.000", "not measured", "2.000", "not measured"]
    assert rows[1][5:] == ["2.222", "1.000", "1.250", "1.000"]  # B and EVIL measured the same
    # The 1.000 cells are marked; a worse ratio is shaded, darker the further from 1.
    assert page.locator("#models-table td.best").count() == 6
    shade = page.evaluate(
        """() => [...document.querySelectorAll('#models-table td[data-ratio]:not(.best)')]
              .map(td => [Number(td.dataset.ratio), getComputedStyle(td).backgroundColor])"""
    )
    alphas = sorted((ratio, float(color.rstrip(")").split(",")[3])) for ratio, color in shade)
    assert len(alphas) >= 4 and [a for _, a in alphas] == sorted(a for _, a in alphas) and alphas[0][1] < alphas[-1][1]
    portable = page.locator("#portable-row td").all_inner_texts()
    assert portable == ["portable choice", "x=2, y=1", "1.667", "1.667", "1.200", "1.500", "1.200"]
    assert "Of the 3 configurations that passed on every model" in page.inner_text("#portable-note")
    page.close()
