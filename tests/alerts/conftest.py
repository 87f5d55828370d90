"""Shared pieces of the alert tests: snapshot builders, a settable clock, a real loopback webhook receiver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from collectors.model import Recipe, Signals, TargetSnapshot


def snap(
    target: str, ts: float, *, up: bool = True, recipe_id: str | None = "r-base", **signals: float
) -> TargetSnapshot:
    """A snapshot with the given signals (everything else unknown)."""
    return TargetSnapshot(
        target=target,
        ts=ts,
        up=up,
        error=None if up else "connection refused",
        signals=Signals(**signals) if up else Signals(),
        recipe_id=recipe_id if up else None,
        deployment="east",
    )


def recipe(**flags: object) -> Recipe:
    base: dict[str, object] = {"model": "kimi-k3", "disable_radix_cache": True, "max_running_requests": 48}
    base.update(flags)
    return Recipe.from_flags(base)  # type: ignore[arg-type]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 recording POSTed JSON; ``status`` and ``delay_s`` shape its answers."""

    url: str
    bodies: list[Any] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    received: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Any]:
        deadline = threading.Event()
        timer = threading.Timer(timeout_s, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                with self.lock:
                    if len(self.bodies) >= count:
                        return list(self.bodies)
                self.received.wait(0.05)
                self.received.clear()
        finally:
            timer.cancel()
        raise AssertionError(f"{self.url} got {len(self.bodies)} bodies, expected {count}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = state["receiver"]
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if rec.delay_s:
                threading.Event().wait(rec.delay_s)
            status = rec.status
            if status < 300:
                with rec.lock:
                    rec.bodies.append(json.loads(body))
                rec.received.set()
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["receiver"] = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state["receiver"]
    server.shutdown()
    server.server_close()
    thread.join()
