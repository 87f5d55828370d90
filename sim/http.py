"""A small HTTP/1.1 server for many ports on one asyncio event loop: the simulated fleet's transport.

Each port routes every request to a handler that returns a ``Reply`` (or asks to delay or never answer).
Keep-alive and pipelining are supported; malformed requests get 400 and a closed connection. A listener can be
closed (the port refuses connections, open connections drop) and reopened on the same port, as a crashed
server's would.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from http import HTTPStatus

from sim.server import Reply

Handler = Callable[[str, str, dict[str, str], bytes], Reply]  # method, target, headers, body
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024  # a /generate prompt at the full 256K context is ~1.2 MB


class _Connection(asyncio.Protocol):
    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._busy = False  # a reply is delayed or hanging: later pipelined requests wait

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._listener.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.connections.discard(self)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._process()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _process(self) -> None:
        while not self._busy and self._transport is not None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    self._fail(431)
                return
            head, rest = self._buffer[:end].decode("latin-1"), self._buffer[end + 4 :]
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._fail(400)
                return
            method, target, version = parts
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    self._fail(400)
                    return
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fail(400)
                return
            if length < 0 or length > MAX_BODY_BYTES:
                self._fail(413)
                return
            if len(rest) < length:
                return  # wait for the body (only POST /generate reads it)
            body, self._buffer = rest[:length], rest[length:]
            keep_alive = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
            try:
                reply = self._listener.handler(method, target, headers, body)
            except Exception as exc:  # a handler bug must not kill the loop serving every other port
                reply = Reply(500, f"simulator error: {exc}\n".encode(), {"Content-Type": "text/plain"})
            if reply.hang:
                self._busy = True  # never answer; the client's timeout ends it
                return
            if reply.stream:
                self._busy = True
                self._stream(reply, keep_alive)
                return
            if reply.delay_s > 0:
                self._busy = True
                loop = asyncio.get_running_loop()
                loop.call_later(reply.delay_s, self._send_later, reply, method, keep_alive)
                return
            self._send(reply, method, keep_alive)

    def _send_later(self, reply: Reply, method: str, keep_alive: bool) -> None:
        self._busy = False
        self._send(reply, method, keep_alive)
        self._process()

    def _stream(self, reply: Reply, keep_alive: bool) -> None:
        """Send a chunked (SSE) body, each piece after its wall delay; the head goes with the first piece."""
        head = self._head(reply, keep_alive, {"Transfer-Encoding": "chunked"})
        loop = asyncio.get_running_loop()
        pieces = list(reply.stream)

        def send(index: int, prefix: bytes) -> None:
            if self._transport is None:
                return  # the client went away (or the port closed): drop the rest
            piece = pieces[index][1]
            self._transport.write(prefix + f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            if index + 1 < len(pieces):
                loop.call_later(pieces[index + 1][0], send, index + 1, b"")
                return
            self._transport.write(b"0\r\n\r\n")
            if not keep_alive:
                self._transport.close()
                return
            self._busy = False
            self._process()

        loop.call_later(reply.delay_s + pieces[0][0], send, 0, head)  # delay_s: the "slow" fault

    def _head(self, reply: Reply, keep_alive: bool, extra: dict[str, str]) -> bytes:
        reason = HTTPStatus(reply.status).phrase
        headers = {**reply.headers, **extra, "Server": "uvicorn"}
        headers["Connection"] = "keep-alive" if keep_alive else "close"
        head = f"HTTP/1.1 {reply.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return head.encode("latin-1") + b"\r\n"

    def _send(self, reply: Reply, method: str, keep_alive: bool) -> None:
        if self._transport is None:
            return
        head = self._head(reply, keep_alive, {"Content-Length": str(len(reply.body))})
        self._transport.write(head + (b"" if method == "HEAD" else reply.body))
        if not keep_alive:
            self._transport.close()

    def _fail(self, status: int) -> None:
        self._send(Reply(status, HTTPStatus(status).phrase.encode() + b"\n"), "GET", keep_alive=False)
        self._buffer = b""


class Listener:
    """One port of the fleet: accepts connections while open and routes requests to ``handler``.

    While closed, the port stays bound without listening: connections are refused, and no client socket of
    this process can take the (ephemeral) port number in the meantime.
    """

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host, self.port, self.handler = host, port, handler
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._placeholder: socket.socket | None = None
        # The fleet's ticker and a test's set_fault() can reconcile the same port at once: one at a time.
        self._lock = asyncio.Lock()

    @property
    def is_open(self) -> bool:
        return self._server is not None

    async def open(self) -> None:
        """Start listening (again on the same port after ``close``); OSError in words if it is taken."""
        async with self._lock:
            await self._open()

    async def _open(self) -> None:
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            # Reopening: SO_REUSEPORT lets the listener bind while our placeholder still holds the port, so
            # there is no moment when a client socket of this process could take it as its ephemeral port. The
            # first open goes without it, so a port someone else listens on is refused in words.
            self._server = await loop.create_server(
                lambda: _Connection(self),
                self.host,
                self.port,
                reuse_address=True,
                reuse_port=self._placeholder is not None,
                family=socket.AF_INET,
                backlog=256,
            )
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        self._release_placeholder()

    async def close(self) -> None:
        """Refuse new connections and drop open ones, as a dead process's port does."""
        async with self._lock:
            await self._close()

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        # Bound (SO_REUSEPORT) before the listener closes: the port is never free, so never taken meanwhile.
        placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            placeholder.bind((self.host, self.port))
            self._placeholder = placeholder
        except OSError:
            placeholder.close()  # open() will say in words if the port is gone
        server.close()
        for connection in list(self.connections):
            connection.abort()
        await server.wait_closed()

    async def shutdown(self) -> None:
        """Close for good: nothing left bound."""
        await self.close()
        self._release_placeholder()

    def _release_placeholder(self) -> None:
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
