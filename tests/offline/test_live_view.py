"""``watch CACHE --html`` with a real mpiexec job writing the file: the page in headless
Chromium shows more configurations as the run goes on, and Ctrl-C stops the server with one
line and exit code 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import mpi_env, start_mpitune, wait_for_batch, write_scale_spec
from headless import browser_or_skip, open_page, screenshot

pytest.importorskip("pandas")
pytest.importorskip("plotly")

CONFIGS = 300


def stop(proc: subprocess.Popen) -> None:
    """End a process group this test started, if it still runs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def count(page) -> int:
    return int(page.get_attribute("#configs", "data-count"))


def test_live_page_follows_a_running_job_and_ctrl_c_stops_it(tmp_path):
    pw, browser = browser_or_skip()
    spec = write_scale_spec(tmp_path, f'{{"STEP": list(range(1, {CONFIGS + 1})), "MODE": [0]}}')
    cache = tmp_path / "out.h5"
    job = start_mpitune(2, [str(spec), "--cache", str(cache)], tmp_path)
    server = None
    try:
        wait_for_batch(job, 1)
        server = subprocess.Popen(
            [sys.executable, "-m", "mpitune", "watch", str(cache), "--html", "--port", "0", "--interval", "0.5"],
            env=mpi_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = server.stdout.readline()
        assert line.startswith(f"mpitune: live report of {cache} at http://127.0.0.1:"), line + server.stderr.read()
        url = line.split(" at ")[1].split()[0]
        page, seen = open_page(browser, url)
        first = count(page)
        assert 0 < first < CONFIGS and "the newest is running" in page.inner_text("#summary")
        page.wait_for_function(f"+document.getElementById('configs').dataset.count > {first}", timeout=60_000)
        screenshot(page, "html-live.png")
        job.communicate(timeout=180)
        assert job.returncode == 0
        page.wait_for_function(
            f"+document.getElementById('configs').dataset.count === {CONFIGS} && "
            "document.getElementById('summary').innerText.includes('the newest is finished')",
            timeout=60_000,
        )
        assert page.locator("#convergence .scatterlayer .trace").first.locator("path.point").count() == CONFIGS
        assert "live: 300 configurations" in page.inner_text("#live-status")
        assert seen.errors == []
        assert all(r.startswith(url) for r in seen.requests) and len(seen.requests) > 2  # the page polled
        page.close()

        os.killpg(server.pid, signal.SIGINT)  # as Ctrl-C in its terminal
        out, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
        assert out.splitlines() == ["mpitune: stopped serving the live report"] and "Traceback" not in err
    finally:
        stop(job)
        if server is not None:
            stop(server)
        browser.close()
        pw.stop()
