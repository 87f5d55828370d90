"""A small real HTTP server on 127.0.0.1 speaking the Prometheus query API, for answers no real engine gives
on demand: Thanos/Mimir-style partial answers (``warnings``), series dropped for some targets, 5xx, garbage.

Every instant query answers one sample per *visible* instance (labels ``instance`` and ``job``): 1 for ``up``
(Prometheus scraped it), ``value`` for everything else (0: an idle, healthy server); range queries answer an
empty matrix (nothing to replay). Attributes may change while it runs.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FakePrometheus:
    """``instances`` are host:port strings; ``visible`` (default: all) those the answers include."""

    def __init__(self, instances: list[str], *, job: str = "sglang") -> None:
        self.instances = list(instances)
        self.visible: list[str] | None = None
        self.job = job
        self.value = "0"
        self.warnings: list[str] = []
        self.status = 200
        self.raw_body: bytes | None = None  # set: answer exactly this (garbage), with ``status``
        # regex on the query -> the ``data`` to answer instead (a resultType surprise, say)
        self.surprises: dict[str, dict[str, Any]] = {}
        self.delay_s = 0.0  # hang this long before answering (a Prometheus that stopped responding)
        self.queries = 0
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                form = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                self._answer(parse_qs(form).get("query", [""])[0])

            def do_GET(self) -> None:
                self._answer(parse_qs(urlsplit(self.path).query).get("query", [""])[0])

            def _answer(self, expr: str) -> None:
                body, status = owner.answer(self.path.split("?")[0], expr)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        class _Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that gave up on a delayed answer closed its end: expected here

        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def answer(self, path: str, expr: str) -> tuple[bytes, int]:
        self.queries += 1
        deadline = time.monotonic() + self.delay_s
        while self.delay_s and time.monotonic() < deadline:  # setting delay_s to 0 releases the waiters
            time.sleep(0.05)
        if self.raw_body is not None:
            return self.raw_body, self.status
        now = time.time()
        surprise = next((data for regex, data in self.surprises.items() if re.search(regex, expr)), None)
        if surprise is not None:
            data: dict[str, Any] = surprise
        elif path.endswith("/query_range"):
            data = {"resultType": "matrix", "result": []}
        elif path.endswith("/series"):  # the running gauge's label sets (no samples: range reads are empty)
            shown = self.instances if self.visible is None else self.visible
            series = [{"__name__": "sglang:num_running_reqs", "instance": i, "job": self.job} for i in shown]
            payload = {
                "status": "success",
                "data": series,
                **({"warnings": self.warnings} if self.warnings else {}),
            }
            return json.dumps(payload).encode(), self.status
        else:
            shown = self.instances if self.visible is None else self.visible
            value = "1" if re.search(r"\bup\{", expr) else self.value
            data = {
                "resultType": "vector",
                "result": [
                    {"metric": {"instance": i, "job": self.job}, "value": [now, value]} for i in shown
                ],
            }
        payload: dict[str, Any] = {"status": "success", "data": data}
        if self.warnings:
            payload["warnings"] = list(self.warnings)
        return json.dumps(payload).encode(), self.status

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
