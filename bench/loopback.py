"""Loopback HTTP fleets for the benchmarks: asyncio servers in a subprocess (so their CPU is their own), each
answering pre-rendered responses on one keep-alive connection per scraper.

A benchmark module runs ``python -m bench.<module> --serve N`` as the fleet (``served``); the child listens
on N ports (``listen`` with ``keep_alive`` handlers), prints its ports as one JSON line and serves until its
stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from collectors.http.loop import HTTP_LOOP

ROOT = Path(__file__).resolve().parents[1]

Answer = Callable[[bytes, bytes], bytes]  # (path, request head) -> the whole HTTP response
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def response(body: bytes, content_type: bytes, status: bytes = b"200 OK") -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
        + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


NOT_FOUND = response(b"not found", b"text/plain", b"404 Not Found")


def routes(answers: Mapping[bytes, bytes]) -> Answer:
    """Answer each path from ``answers``; any other path is not found."""
    return lambda path, _head: answers.get(path, NOT_FOUND)


def keep_alive(answer: Answer) -> Handler:
    """A connection handler writing ``answer(path, head)`` to each request until the client hangs up."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one connection serves every cycle
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].split(b"?", 1)[0]  # like any server: the query is not the route
                writer.write(answer(path, head))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    return handle


async def listen(handlers: Iterable[Handler], *, backlog: int = 128) -> list[int]:
    """One loopback listener per handler: their ports, in order."""
    servers = [await asyncio.start_server(h, "127.0.0.1", 0, backlog=backlog) for h in handlers]
    return [server.sockets[0].getsockname()[1] for server in servers]


async def until_stdin_closes() -> None:
    """Serve until the parent closes our stdin (``served`` does on exit)."""
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


@contextmanager
def served(module: str, count: int) -> Iterator[tuple[object, int]]:
    """``python -m <module> --serve <count>`` as a child: the JSON line it prints first (its ports) and its
    pid. On exit the scrape loop's keep-alive connections close first, so the servers exit without a pending
    read, then the child."""
    server = subprocess.Popen(
        [sys.executable, "-m", module, "--serve", str(count)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield json.loads(server.stdout.readline()), server.pid
    finally:
        HTTP_LOOP.close()
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=60)
