"""The live view: the report's page served over HTTP while a run writes its file.

``GET /`` is the page with the newest data embedded. ``GET /data.json?have=V`` is the newest
payload, or 204 when the page already has version V. The file is read again only when its size
or modification time changed, however many pages poll. The pandas loader reads it as an SWMR
reader while a writer holds it. The server listens on loopback unless told otherwise. A
cluster's head node is shared, and ``ssh -L`` reaches loopback.

A page of another site can reach loopback too, through a name it points at 127.0.0.1 (DNS
rebinding). Its requests then carry that name in ``Host``. So a name other than loopback's,
or the address the server listens on, is refused with 403. A connection that sends nothing
for ``IDLE_TIMEOUT_S`` is closed, as each holds a thread.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mpitune.errors import UserError
from mpitune.offline.html.page import Live, page_html, plotly_js
from mpitune.offline.html.payload import build_from_file, to_json

log = logging.getLogger(__name__)
IDLE_TIMEOUT_S = 10.0  # a connection that has sent nothing for this long is closed
LOOPBACK_NAMES = ("localhost",)


@dataclass
class Snapshot:
    """One reading of the file: its version (size and modification time) and the payload."""

    version: str
    json: str
    title: str


class Source:
    """The newest payload of a file, rebuilt when the file changed. A reading that fails
    mid-write keeps the previous one, and the next request tries again."""

    def __init__(self, cache: str):
        self.cache = cache
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None

    def _version(self) -> str:
        st = os.stat(self.cache)
        return f"{st.st_mtime_ns}-{st.st_size}"

    def snapshot(self) -> Snapshot:
        with self._lock:
            try:
                version = self._version()
                if self._snapshot is None or self._snapshot.version != version:
                    payload = build_from_file(self.cache, version=version)
                    self._snapshot = Snapshot(version, to_json(payload), f"mpitune: {payload['summary']['kernel']}")
            except (UserError, OSError) as exc:
                if self._snapshot is None:
                    raise UserError(str(exc)) from None
                log.warning("keeping the last reading of %s: %s", self.cache, exc)
            return self._snapshot


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port and brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, colon, port = header.rpartition(":")
    return name if colon and port.isdigit() and ":" not in name else header


@dataclass(frozen=True)
class Hosts:
    """The names a request's ``Host`` may give: loopback's, and the address the server listens on.

    A server on every address (0.0.0.0, ::) is on a network one trusts. It also takes any IP
    address and this machine's name. Another site cannot point an address at loopback.
    """

    names: frozenset[str]
    any_address: bool

    @classmethod
    def of(cls, listening: str) -> Hosts:
        bare = listening.strip("[]").lower()
        try:
            everywhere = ipaddress.ip_address(bare).is_unspecified
        except ValueError:
            everywhere = False
        own = {socket.gethostname().lower(), socket.getfqdn().lower()} if everywhere else set()
        return cls(frozenset({*LOOPBACK_NAMES, bare, *own}), everywhere)

    def allow(self, header: str | None) -> bool:
        """Whether ``header`` names this server; no header, or another name, is refused."""
        name = host_name(header or "").rstrip(".")
        if name in self.names:
            return bool(name)
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        return address.is_loopback or self.any_address


def handler(
    source: Source, live: Live, listening: str = "127.0.0.1", idle_timeout_s: float = IDLE_TIMEOUT_S
) -> type[BaseHTTPRequestHandler]:
    hosts = Hosts.of(listening)

    class Handler(BaseHTTPRequestHandler):
        timeout = idle_timeout_s  # the socket's: an idle connection ends in handle_one_request

        def do_GET(self) -> None:
            if not hosts.allow(self.headers.get("Host")):
                body = f"refused: Host {self.headers.get('Host')!r} is not this server's loopback address\n"
                self._send(body.encode(), "text/plain; charset=utf-8", HTTPStatus.FORBIDDEN)
                return
            url = urlsplit(self.path)
            if url.path == "/":
                snap = source.snapshot()
                self._send(page_html(snap.json, snap.title, live).encode(), "text/html; charset=utf-8")
            elif url.path == "/" + live.endpoint:
                snap = source.snapshot()
                if parse_qs(url.query).get("have", [""])[0] == snap.version:
                    self.send_response(HTTPStatus.NO_CONTENT)
                    self.end_headers()
                else:
                    self._send(snap.json.encode(), "application/json")
            else:
                self.send_error(HTTPStatus.NOT_FOUND)

        def _send(self, body: bytes, kind: str, status: HTTPStatus = HTTPStatus.OK) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a page mid-request does not hold up Ctrl-C


def listen(
    cache: str, host: str = "127.0.0.1", port: int = 0, interval_s: float = 5.0, idle_timeout_s: float = IDLE_TIMEOUT_S
) -> ThreadingHTTPServer:
    """The live report's server of ``cache``, bound but not yet serving. Port 0 picks a free one."""
    plotly_js()  # say what to install before anything else
    source = Source(cache)
    source.snapshot()  # a file that cannot be read fails here, with one line
    _Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return _Server((host, port), handler(source, Live(interval_s=interval_s), host, idle_timeout_s))
    except (OSError, OverflowError) as exc:
        raise UserError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None


def serve(cache: str, host: str = "127.0.0.1", port: int = 0, interval_s: float = 5.0) -> int:
    """Serve the live report of ``cache`` until Ctrl-C; port 0 picks a free one."""
    server = listen(cache, host, port, interval_s)
    bound = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"mpitune: live report of {cache} at http://{shown}:{bound}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("mpitune: stopped serving the live report", flush=True)
    finally:
        server.server_close()
    return 0
