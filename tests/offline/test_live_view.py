"""``watch CACHE --html`` with a real mpiexec job writing the file: the page in headless
Chromium shows more configurations as the run goes on, and Ctrl-C stops the server with one
line and exit code 0. The server's guards in process, on a real results file: Host names other
than loopback's refused (DNS rebinding), strict JSON, idle connections closed."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

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


@pytest.fixture(scope="module")
def served(run_with_failures):
    """The live view of a real results file (with failed rows: NaN times), served from a thread
    on a free loopback port, idle connections closed after 1 s; its port."""
    from mpitune.offline.html.server import listen

    server = listen(str(run_with_failures), "127.0.0.1", 0, interval_s=5.0, idle_timeout_s=1.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def get(port: int, path: str, host: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def strict(text: bytes):
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_only_loopback_names_are_served(served):
    port = served
    for host in ("localhost", f"localhost:{port}", "LOCALHOST.", "127.0.0.1", f"127.0.0.1:{port}", "127.3.2.1"):
        assert get(port, "/data.json", host)[0] == 200, host
    for host in ("[::1]", f"[::1]:{port}"):
        assert get(port, "/data.json", host)[0] == 200, host
    for host in ("evil.example", f"evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io", "10.0.0.1", ""):
        status, body = get(port, "/", host)
        assert status == 403 and body.startswith(b"refused: Host") and len(body) < 200, (host, body)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:  # HTTP/1.0: no Host at all
        raw.sendall(b"GET /data.json HTTP/1.0\r\n\r\n")
        assert raw.makefile("rb").readline().split()[1] == b"403"


def test_hosts_of_a_server_listening_everywhere():
    from mpitune.offline.html.server import Hosts

    assert Hosts.of("0.0.0.0").allow("10.1.2.3:8050") and Hosts.of("::").allow("[fe80::1]")
    assert not Hosts.of("0.0.0.0").allow("evil.example") and not Hosts.of("127.0.0.1").allow("10.1.2.3")
    assert Hosts.of("10.1.2.3").allow("10.1.2.3:8050") and not Hosts.of("10.1.2.3").allow("10.1.2.4")


def test_the_served_json_is_strict(served):
    from mpitune.offline.html.page import Live, page_html

    status, body = get(served, "/data.json", "localhost")
    assert status == 200 and strict(body)["summary"]["configs"] == 12  # failed rows: no NaN token
    status, page = get(served, "/", "localhost")
    live = page.split(b'<script type="application/json" id="live">')[1].split(b"</script>")[0]
    assert status == 200 and strict(live) == {"endpoint": "data.json", "interval_s": 5.0}
    with pytest.raises(ValueError):
        page_html("{}", "t", Live(interval_s=float("nan")))


def test_an_idle_connection_is_closed_while_others_are_served(served):
    with socket.create_connection(("127.0.0.1", served), timeout=30) as idle:
        started = time.monotonic()
        assert get(served, "/data.json", "localhost")[0] == 200  # the idle one holds no one up
        assert idle.recv(1) == b""  # closed by the server: 1 s here, IDLE_TIMEOUT_S in use
        assert time.monotonic() - started < 20
