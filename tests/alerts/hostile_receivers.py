"""A webhook receiver on 127.0.0.1 that misbehaves on purpose: slow, hanging, closing after reading,
redirecting, refusing bodies over a size with 413, failing a few times before it accepts.

Every POST that reaches it is recorded (body bytes and headers), answered or not, so a test can count exactly
what arrived: copies of one notification, alerts across split bodies, requests a redirect would have caused.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Post:
    path: str
    body: bytes
    headers: dict[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


# What to do with one POST (the receiver, the post, how many POSTs came before it): "ok", "hang", "close",
# "redirect", or an HTTP status code.
Behaviour = Callable[["HostileReceiver", Post, int], "str | int"]


@dataclass
class HostileReceiver:
    behaviour: Behaviour
    delay_s: float = 0.0  # before answering (ok or status)
    posts: list[Post] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "METHOD path" of every request, POST or not
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)  # ends the "hang"s
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    _ok: list[bool] = field(default_factory=list)  # whether each POST was answered 2xx

    def accepted(self) -> list[Post]:
        """The POSTs this receiver answered 2xx, in order."""
        with self.lock:
            return [p for p, ok in zip(self.posts, self._ok, strict=True) if ok]

    def count(self) -> int:
        with self.lock:
            return len(self.posts)

    def wait_posts(self, count: int, timeout_s: float = 15.0) -> list[Post]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.posts) >= count:
                    return list(self.posts)
            time.sleep(0.02)
        raise AssertionError(f"{self.url} got {self.count()} POSTs, expected {count}")

    def wait_accepted(self, count: int, timeout_s: float = 15.0) -> list[Post]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.accepted()
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"{self.url} accepted {len(self.accepted())} POSTs, expected {count}")


def ok(receiver: HostileReceiver, post: Post, before: int) -> str | int:
    return "ok"


def always(action: str | int) -> Behaviour:
    return lambda receiver, post, before: action


def fail_first(times: int, status: int = 500) -> Behaviour:
    """``status`` for the first ``times`` POSTs, then 200."""
    return lambda receiver, post, before: status if before < times else "ok"


def refuse_over(max_bytes: int) -> Behaviour:
    """A proxy in front of the receiver: 413 for a body over ``max_bytes`` (nginx's client_max_body_size)."""
    return lambda receiver, post, before: 413 if len(post.body) > max_bytes else "ok"


@contextmanager
def hostile_receiver(behaviour: Behaviour, delay_s: float = 0.0) -> Iterator[HostileReceiver]:
    receiver = HostileReceiver(behaviour, delay_s)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with receiver.lock:
                receiver.requests.append(f"GET {self.path}")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            post = Post(self.path, body, {k: v for k, v in self.headers.items()})
            with receiver.lock:
                before = len(receiver.posts)
                receiver.requests.append(f"POST {self.path}")
                receiver.posts.append(post)
                receiver._ok.append(False)
            action = receiver.behaviour(receiver, post, before)
            if action == "hang":
                receiver.release.wait(60)
                self.close_connection = True
                return
            if action == "close":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if receiver.delay_s:
                time.sleep(receiver.delay_s)
            if action == "redirect":
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{receiver.port}/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 200 if action == "ok" else int(action)
            if status < 300:
                with receiver.lock:
                    receiver._ok[before] = True
            answer = b"ok" if status < 300 else f"refused: {status}".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
