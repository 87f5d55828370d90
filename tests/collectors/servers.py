"""Real HTTP servers on 127.0.0.1 (ephemeral ports) for the collector tests: well-behaved and misbehaving.

``LoopbackServer`` maps paths to routes; a route writes the whole answer itself, so it can lie about
lengths, trickle bytes, hang or cut the connection. ``FakeSGLang`` is a LoopbackServer answering /metrics from
a ``Load`` (content-negotiated like SGLang) and /server_info from a dict.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.collectors.bodies import SERVER_INFO, Load, render

Route = Callable[["Handler"], None]


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    client_port: int


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like SGLang's uvicorn
    server: _Server

    def do_GET(self) -> None:
        owner = self.server.owner
        path = self.path.split("?")[0]
        with owner.lock:
            owner.seen.append(
                Seen(path, {k.lower(): v for k, v in self.headers.items()}, self.client_address[1])
            )
        route = owner.routes.get(path)
        if route is None:
            send(self, b"not found\n", status=404, content_type="text/plain")
        else:
            route(self)

    def log_message(self, format: str, *args: Any) -> None:  # silence per-request logs
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer


class LoopbackServer:
    def __init__(self, routes: dict[str, Route] | None = None) -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.bytes_sent = 0
        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def hits(self, path: str) -> int:
        with self.lock:
            return sum(1 for s in self.seen if s.path == path)

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def send(
    handler: Handler,
    body: bytes,
    *,
    status: int = 200,
    content_type: str | None = "text/plain; version=0.0.4; charset=utf-8",
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    if content_type is not None:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def reply(body: bytes | str, **kwargs: Any) -> Route:
    data = body.encode() if isinstance(body, str) else body
    return lambda handler: send(handler, data, **kwargs)


def json_reply(obj: object, status: int = 200) -> Route:
    return reply(json.dumps(obj), status=status, content_type="application/json")


def drip(body: bytes, every_s: float) -> Route:
    """Headers at once, then one byte every ``every_s``: no single read ever waits long."""

    def route(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.flush()
        with suppress(OSError):
            for index in range(len(body)):
                if handler.server.owner.stopping.wait(every_s):
                    return
                handler.wfile.write(body[index : index + 1])
                handler.wfile.flush()

    return route


def slow_status_line(every_s: float) -> Route:
    """The status line itself trickles in: the answer never gets past its first line in time."""

    def route(handler: Handler) -> None:
        handler.close_connection = True
        with suppress(OSError):
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n":
                if handler.server.owner.stopping.wait(every_s):
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()

    return route


def truncated(body: bytes, keep_bytes: int, *, declare_length: bool = True) -> Route:
    """Announce ``len(body)`` bytes (or nothing), send ``keep_bytes`` of them, close the connection."""

    def route(handler: Handler) -> None:
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        if declare_length:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(body[:keep_bytes])
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_WR)

    return route


def endless(total_bytes: int, *, declare_length: bool) -> Route:
    """A huge body of valid-looking sample lines, streamed 1 MiB at a time; counts what was really sent."""
    line = b'sglang:num_running_reqs{tp_rank="0"} 1.0\n'
    chunk = line * (1024 * 1024 // len(line))

    def route(handler: Handler) -> None:
        owner = handler.server.owner
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        if declare_length:
            handler.send_header("Content-Length", str(total_bytes))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        sent = 0
        with suppress(OSError):
            while sent < total_bytes:
                piece = chunk[: total_bytes - sent]
                handler.wfile.write(piece)
                sent += len(piece)
                with owner.lock:
                    owner.bytes_sent += len(piece)

    return route


def hang(handler: Handler) -> None:
    """Read the request, answer nothing until the server stops."""
    handler.close_connection = True
    handler.server.owner.stopping.wait(30)


class FakeSGLang(LoopbackServer):
    """/metrics from ``load`` (negotiated on Accept, gzip on request), /server_info from ``info``."""

    def __init__(self, load: Load | None = None, info: dict[str, Any] | None = None) -> None:
        self.load = load if load is not None else Load()
        self.info: dict[str, Any] | None = dict(info if info is not None else SERVER_INFO)
        self.metrics_status = 200
        super().__init__({"/metrics": self._metrics, "/server_info": self._server_info})

    def _metrics(self, handler: Handler) -> None:
        if self.metrics_status != 200:
            send(handler, b"unavailable\n", status=self.metrics_status, content_type="text/plain")
            return
        body, content_type = render(self.load, handler.headers.get("Accept") or "*/*")
        headers = {}
        if "gzip" in (handler.headers.get("Accept-Encoding") or ""):
            body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
        send(handler, body, content_type=content_type, headers=headers)

    def _server_info(self, handler: Handler) -> None:
        if self.info is None:
            send(handler, b'{"detail":"Not Found"}', status=404, content_type="application/json")
        else:
            send(handler, json.dumps(self.info).encode(), content_type="application/json")


@contextmanager
def silent_listener() -> Iterator[str]:
    """A port whose kernel accepts connections that nobody ever reads or answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def refused_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
