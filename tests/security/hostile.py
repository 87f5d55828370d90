"""Hostile loopback servers for the security tests: each one misbehaves in a way that could carry a secret or
markup into specwatch's errors, store, logs or pages (echoing the Authorization header, redirecting, HTML in a
status line), plus a canary that counts any request made to it.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.collectors.bodies import Load, render
from tests.collectors.servers import Handler, LoopbackServer, Route, send


def auth_of(handler: Handler) -> str:
    return handler.headers.get("Authorization") or "no-authorization-header"


def reason_echo(status: int) -> Route:
    """Answers ``status`` with the Authorization header as its reason phrase."""

    def route(handler: Handler) -> None:
        handler.send_response(status, auth_of(handler))
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


def content_type_echo(handler: Handler) -> None:
    send(handler, b"# nothing\n", content_type=f"text/x-{auth_of(handler).replace(' ', '-')}")


def body_echo(handler: Handler) -> None:
    """A body whose first line is the Authorization header: the parser quotes bad lines."""
    send(handler, f'sglang:num_running_reqs{{tp_rank="0"}} {auth_of(handler)}\n'.encode())


def redirect_echo(handler: Handler) -> None:
    send(handler, b"", status=302, headers={"Location": f"http://127.0.0.1:9/?{auth_of(handler)}"})


def metrics_ok(handler: Handler) -> None:
    body, content_type = render(Load(), handler.headers.get("Accept") or "*/*")
    send(handler, body, content_type=content_type)


def server_info_echo(handler: Handler) -> None:
    """/server_info that puts the Authorization header into the recipe's flags."""
    info = {"version": auth_of(handler), "served_model_name": auth_of(handler), "tp_size": 2}
    send(handler, json.dumps(info).encode(), content_type="application/json")


def reflecting_servers() -> dict[str, LoopbackServer]:
    """Every way a target can hand the bearer token back to the collector."""
    return {
        "echo-401": LoopbackServer({"/metrics": reason_echo(401)}),
        "echo-500": LoopbackServer({"/metrics": reason_echo(500)}),
        "echo-type": LoopbackServer({"/metrics": content_type_echo}),
        "echo-body": LoopbackServer({"/metrics": body_echo}),
        "echo-redirect": LoopbackServer({"/metrics": redirect_echo}),
        "echo-info": LoopbackServer({"/metrics": metrics_ok, "/server_info": server_info_echo}),
    }


@dataclass
class Canary:
    """An HTTP server that records every request line it gets (and POST bodies)."""

    url: str
    hits: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


@contextmanager
def canary() -> Iterator[Canary]:
    """Also a webhook receiver: POST bodies are kept in ``bodies``."""
    record = Canary(url="")

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            record.hits.append(self.requestline)
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                record.bodies.append(self.rfile.read(length))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    record.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def status_line_server(status_line: bytes, body: bytes = b"") -> LoopbackServer:
    """Sends ``status_line`` verbatim (any reason phrase, markup included)."""

    def route(handler: Handler) -> None:
        handler.close_connection = True
        with suppress(OSError):
            handler.wfile.write(status_line + b"\r\nContent-Type: text/plain\r\n")
            handler.wfile.write(f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_WR)

    return LoopbackServer({"/metrics": route})


class _PostHandler(Handler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.do_GET()


class PostableServer(LoopbackServer):
    """A LoopbackServer whose routes also answer POST (PromQL and webhooks POST)."""

    def __init__(self, routes: dict[str, Route]) -> None:
        super().__init__(routes)
        self._httpd.RequestHandlerClass = _PostHandler
