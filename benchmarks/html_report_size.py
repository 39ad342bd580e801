"""How the HTML report copes with a large file: a synthetic Kernel Tuner cache of N configurations
is imported, rendered with ``report --html`` and opened in headless Chromium.

    python benchmarks/html_report_size.py [--configs 100000] [--chromium /usr/bin/chromium]

Prints the seconds to import and to render, the page's size, and (where Playwright and Chromium
are installed) the seconds until every chart is drawn, to sort the table and to show a hover.
The cache's times come from a seeded random landscape with 5% of the configurations failing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def kt_cache(path: str, configs: int) -> None:
    """A Kernel Tuner cache of about ``configs`` configurations over four parameters."""
    side = max(2, round(configs**0.25))
    params = {f"p{i}": list(range(1, side + 1)) for i in range(4)}
    rng = np.random.default_rng(1)
    cache = {}
    for values in itertools.islice(itertools.product(*params.values()), configs):
        key = ",".join(map(str, values))
        entry = dict(zip(params, values))
        if rng.random() < 0.05:
            entry["time"] = "CompilationFailedConfig"
        else:
            base = 1.0 + sum((v - side / 2) ** 2 for v in values) / side**2
            times = list(base * (1 + 0.02 * rng.standard_normal(7)))
            entry.update(
                time=float(np.median(times)),
                times=times,
                compile_time=50.0,
                verification_time=1.0,
                benchmark_time=float(sum(times)),
            )
        cache[key] = entry
    doc = {
        "device_name": "synthetic",
        "kernel_name": "k",
        "problem_size": [1024],
        "tune_params_keys": list(params),
        "tune_params": params,
        "objective": "time",
        "cache": cache,
    }
    with open(path, "w") as fh:
        json.dump(doc, fh)


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=REPO))
    return time.perf_counter() - started


def browse(page_path: str, chromium: str) -> dict[str, float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not shutil.which(chromium) and not os.path.exists(chromium):
        return None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        started = time.perf_counter()
        page.goto("file://" + page_path)
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=120_000)
        drawn_s = time.perf_counter() - started
        header = page.locator("table th").nth(1)
        started = time.perf_counter()
        header.click()
        page.wait_for_timeout(0)
        sort_s = time.perf_counter() - started
        box = page.locator("#convergence").bounding_box()
        started = time.perf_counter()
        page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5)
        page.wait_for_timeout(0)
        hover_s = time.perf_counter() - started
        browser.close()
    return {"drawn_s": drawn_s, "sort_s": sort_s, "hover_s": hover_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=100_000)
    p.add_argument("--chromium", default="/usr/bin/chromium")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, h5, html = (os.path.join(tmp, name) for name in ("kt.json", "big.h5", "big.html"))
        kt_cache(source, args.configs)
        import_s = timed([sys.executable, "-m", "mpitune", "import", source, "--out", h5])
        render_s = timed([sys.executable, "-m", "mpitune", "report", h5, "--html", html])
        size_mb = os.path.getsize(html) / 1e6
        seen = browse(html, args.chromium)
    print(f"command: python benchmarks/html_report_size.py --configs {args.configs}")
    print(
        f"{args.configs} configurations: import {import_s:.1f} s, report --html {render_s:.1f} s, page {size_mb:.1f} MB"
    )
    if seen is None:
        print("browser: not measured (needs playwright and chromium)")
    else:
        print(
            f"browser: every chart drawn {seen['drawn_s']:.1f} s after opening, sort {seen['sort_s']:.2f} s, "
            f"hover {seen['hover_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
