"""A simulated notification receiver: an Alertmanager-webhook endpoint on a fixed loopback port that can go
down (the port closed: connections refused) and come back on the same port, keeping every body it was sent.

The soak benchmark and the fault tests drive receiver outages with it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """``down()`` closes the port, ``up()`` listens again on the same port; every delivered body is kept, in
    order, beside the ``time.monotonic()`` it arrived at (read them under ``lock``)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived_at: list[float] = []
        self.lock = threading.Lock()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def up(self) -> None:
        if self._server is not None:
            return
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with owner.lock:
                    owner.bodies.append(json.loads(body))
                    owner.arrived_at.append(time.monotonic())
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)  # SO_REUSEADDR: same port again
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def down(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def alerts(self) -> list[tuple[str, str, str]]:
        """(fingerprint, status, startsAt|endsAt) of every alert in every delivered message."""
        with self.lock:
            bodies = list(self.bodies)
        return [notification_key(alert) for body in bodies for alert in body.get("alerts", [])]


def notification_key(alert: dict[str, Any]) -> tuple[str, str, str]:
    """What identifies one notification: the alert, firing or resolved, and which episode."""
    when = alert["startsAt"] if alert["status"] == "firing" else alert["endsAt"]
    return (str(alert["fingerprint"]), str(alert["status"]), str(when))
