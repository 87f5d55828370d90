"""Viewer sessions that speak Streamlit's browser protocol without drawing: what a tab asks of the server.

A chromium tab costs this 2-core box 0.06–0.1 core to draw (measured by ``bench viewers``), so 30 tabs would
need 2–3 cores for the browsers alone and never open. The server cannot tell who draws: it sees a websocket on
``/_stcore/stream`` that sends ``BackMsg``s and reads ``ForwardMsg``s. Each session here sends what the
frontend sends — the page's ``rerun_script`` with its query string, then a fragment rerun every time an
``auto_rerun`` message said (``st.fragment(run_every=…)``: the browser, not the server, keeps that clock),
the hashes of the cacheable messages it has seen (so the server sends references, as to a browser) — and
records when the live panel's "updated HH:MM:SS UTC" arrives, as the chromium tabs' poller does.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

_UPDATED = re.compile(rb"updated (\d\d:\d\d:\d\d) UTC([^\x00-\x1f]{0,80})")


@dataclass
class ProtocolSession:
    """One viewer: its page path and query, what it has seen."""

    path: str  # "fleet", "server"
    query: str  # "range=15m"
    refreshes: list[list[Any]] = field(default_factory=list)  # [arrived_ts, "HH:MM:SS", busy], as the poller
    exceptions: int = 0
    page_script_hash: str = ""
    cached: set[str] = field(default_factory=set)
    error: str = ""

    def _rerun(self, fragment_id: str = "") -> bytes:
        message = BackMsg()
        state = message.rerun_script
        state.query_string = self.query
        state.page_name = self.path
        state.page_script_hash = self.page_script_hash
        state.cached_message_hashes.extend(sorted(self.cached))
        if fragment_id:
            state.fragment_id = fragment_id
            state.is_auto_rerun = True
        return bytes(message.SerializeToString())

    def _read(self, data: bytes) -> list[tuple[str, float]]:
        """Record what one ForwardMsg says; the auto-reruns it asks for (fragment id, interval s)."""
        message = ForwardMsg()
        message.ParseFromString(data)
        if message.metadata.cacheable and message.hash:
            self.cached.add(message.hash)
        kind = message.WhichOneof("type")
        if kind == "new_session" and message.new_session.page_script_hash:
            self.page_script_hash = message.new_session.page_script_hash
        elif kind == "navigation" and message.navigation.page_script_hash:
            self.page_script_hash = message.navigation.page_script_hash
        elif kind == "auto_rerun":
            return [(message.auto_rerun.fragment_id, float(message.auto_rerun.interval))]
        elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            if message.delta.new_element.WhichOneof("type") == "exception":
                self.exceptions += 1
            else:
                found = _UPDATED.search(data)
                if found:
                    stamp = found.group(1).decode()
                    if not self.refreshes or self.refreshes[-1][1] != stamp:
                        self.refreshes.append([time.time(), stamp, b"busy" in found.group(2)])
        return []

    async def run(self, url: str, stop: asyncio.Event) -> None:
        timers: dict[str, asyncio.Task[None]] = {}
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(f"{url}/_stcore/stream", protocols=("streamlit",), max_msg_size=0) as socket,
            ):
                await socket.send_bytes(self._rerun())

                async def tick(fragment_id: str, interval_s: float) -> None:
                    while True:
                        await asyncio.sleep(interval_s)
                        await socket.send_bytes(self._rerun(fragment_id))

                reading = asyncio.ensure_future(socket.receive())
                stopping = asyncio.ensure_future(stop.wait())
                while True:
                    await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    if stopping.done():
                        reading.cancel()
                        break
                    received = reading.result()
                    if received.type != aiohttp.WSMsgType.BINARY:
                        self.error = f"the server closed the session ({received.type.name})"
                        break
                    for fragment_id, interval_s in self._read(received.data):
                        if fragment_id not in timers:  # the frontend keeps one clock per fragment
                            timers[fragment_id] = asyncio.ensure_future(tick(fragment_id, interval_s))
                    reading = asyncio.ensure_future(socket.receive())
        except (aiohttp.ClientError, OSError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            for timer in timers.values():
                timer.cancel()


class ProtocolViewers:
    """Sessions on one event loop in a thread of their own, until ``close()``."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._tasks: list[Any] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="protocol-viewers", daemon=True)
        self._thread.start()

    def open(self, session: ProtocolSession) -> ProtocolSession:
        self._tasks.append(asyncio.run_coroutine_threadsafe(session.run(self._url, self._stop), self._loop))
        return session

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        for task in self._tasks:
            task.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
