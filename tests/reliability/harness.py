"""Pieces the fault tests share: a webhook receiver that can go down and come back on the same port, tiny
misbehaving servers the simulator does not offer (connection resets), a settable clock, and store checks.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.collectors.servers import FakeSGLang, Handler, LoopbackServer


class Receiver:
    """An Alertmanager-webhook receiver on a fixed loopback port: ``down()`` closes the port (connections are
    refused), ``up()`` listens again on the same port. Every delivered body is kept, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived_at: list[float] = []  # time.monotonic() of each body, beside it
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


def expected_notifications(store_path: Path, receiver_url: str) -> Counter[tuple[str, str, str]]:
    """Every notification specwatch queued for ``receiver_url`` (the outbox), whatever became of it."""
    with closing(sqlite3.connect(store_path)) as db:
        rows = db.execute("SELECT payload FROM alert_outbox WHERE receiver = ? ORDER BY id", (receiver_url,))
        payloads = [json.loads(row[0]) for row in rows]
    return Counter(notification_key(alert) for payload in payloads for alert in payload["alerts"])


def transitions_notified(store_path: Path) -> Counter[tuple[str, str]]:
    """(fingerprint, firing|resolved) for each firing and each resolution the engine recorded."""
    with closing(sqlite3.connect(store_path)) as db:
        rows = db.execute("SELECT fingerprint, from_state, to_state FROM alert_transitions").fetchall()
    out: Counter[tuple[str, str]] = Counter()
    for fingerprint, before, after in rows:
        if after == "firing":
            out[(fingerprint, "firing")] += 1
        elif before == "firing" and after == "inactive":
            out[(fingerprint, "resolved")] += 1
    return out


class Clock:
    """Wall time plus an offset the test moves (a clock stepped by NTP, a VM resumed)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


def reset_route(handler: Handler) -> None:
    """Read the request, then reset the connection (RST, not FIN): 'connection reset by peer'."""
    handler.close_connection = True
    with suppress(OSError):
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()


def resetting_server() -> LoopbackServer:
    return LoopbackServer({"/metrics": reset_route, "/server_info": reset_route})


def integrity(store_path: Path) -> str:
    with closing(sqlite3.connect(store_path)) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def samples_by_target(store_path: Path) -> Counter[str]:
    with closing(sqlite3.connect(store_path)) as db:
        return Counter(dict(db.execute("SELECT target, COUNT(*) FROM samples GROUP BY target").fetchall()))


def rss_mb() -> float:
    """This process's resident memory now (not the peak), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def tmpfs(folder: Path, size: str = "2m") -> Iterator[bool]:
    """Mount a tiny tmpfs on ``folder`` (root only); yields whether it worked (False: use a plain folder)."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, check=False
    )
    try:
        yield done.returncode == 0
    finally:
        if done.returncode == 0:
            for _ in range(20):
                if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode == 0:
                    break
                time.sleep(0.1)
            else:  # something still has a file open there: detach it now, the kernel frees it when closed
                subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


@contextmanager
def fake_fleet(*names: str) -> Iterator[dict[str, FakeSGLang]]:
    """Loopback SGLang servers by name, stopped on the way out."""
    fleet = {name: FakeSGLang() for name in names}
    try:
        yield fleet
    finally:
        for server in fleet.values():
            server.stop()
