"""The process's one HTTP event loop: a daemon thread running asyncio, and the aiohttp sessions every request
of specwatch goes through (scrapes, /server_info, probes, PromQL queries, notifications).

Why one library, aiohttp, on one loop: a scrape cycle of 1,000 servers is 1,000 concurrent requests, which a
thread pool paid for in CPU (``python -m bench http_clients``: a third or less of the CPU per request of
``requests`` with 64 threads). The synchronous callers (PromQL, probes, notifications) hand their coroutine to
the loop and wait; measured in the same benchmark, that costs no more CPU per request than ``requests`` did
(0.75–1.0× for PromQL-shaped answers of 2 KB and 1 MB), so a second library would buy nothing but a second
set of deadlines, caps and exceptions to keep alike.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from isal import isal_zlib
from yarl import URL

USER_AGENT = "specwatch-collector/0.1"
# uvicorn (SGLang's server) drops idle keep-alive connections after 5 s; an idle connection we hold longer
# than the scrape interval is reused or, if the server closed it, replaced (aiohttp retries a GET once then).
KEEPALIVE_S = 120.0
_HEADER_LINE_BYTES = 65536  # as http.client: a server's long header is read, not an error
# How long the environment's proxy and ~/.netrc answer for a host is kept (a changed ~/.netrc is read then).
ENVIRONMENT_KEPT_S = 60.0
T = TypeVar("T")

# aiohttp inflates gzip bodies with the zlib module by default: ~105 µs for the golden body (8 KB of gzip →
# 97 KB), an eighth of a whole-body scrape's CPU at 1,000 servers (py-spy). ISA-L's inflate (python-isal, a
# backend aiohttp documents as a drop-in) reads the same body in ~30 µs. Set once for the process: every
# aiohttp request of the process is specwatch's.
aiohttp.set_zlib_backend(isal_zlib)


@dataclass(frozen=True, slots=True)
class Environment:
    """What the environment says about reaching one host: its proxy (``HTTP(S)_PROXY`` unless ``NO_PROXY``
    exempts it) and ~/.netrc's credentials for it, as aiohttp's ``trust_env`` reads them; the credentials as
    the header values that carry them (never in a repr)."""

    proxy: URL | None = None
    proxy_authorization: str | None = field(default=None, repr=False)
    authorization: str | None = field(default=None, repr=False)


def read_environment(url: URL) -> Environment:
    """The environment for ``url``'s host, read now (aiohttp's own rules: ``aiohttp.helpers``)."""
    proxy: URL | None = None
    proxy_authorization = authorization = None
    with contextlib.suppress(LookupError):  # no proxy for this host
        proxy, proxy_auth = get_env_proxy_for_url(url)
        proxy_authorization = proxy_auth.encode() if proxy_auth is not None else None
    with contextlib.suppress(LookupError):  # no ~/.netrc, or no entry for this host
        authorization = basicauth_from_netrc(netrc_from_env(), url.host).encode() if url.host else None
    return Environment(proxy, proxy_authorization, authorization)


class HttpLoop:
    """One event loop thread and its aiohttp sessions, started on first use.

    Coroutines run on the loop (``run`` waits for one from any other thread). Two sessions, alike but for
    the environment: ``session()`` reaches targets directly (no proxy, no ``~/.netrc`` credentials sent to
    them); ``session(services=True)`` honours the environment's proxy settings and ~/.netrc
    (``environment``), since Prometheus and notification receivers are often reached through a proxy.
    Neither sends cookies back, and neither retries beyond aiohttp's one retry of a request on a keep-alive
    connection the server had closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        self._environments: dict[tuple[str, str | None, int | None], tuple[float, Environment]] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="specwatch-http", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                # Closed before the interpreter ends, so aiohttp has no unclosed session to complain about.
                atexit.register(self.close)
            return self._loop

    def session(self, *, services: bool = False) -> aiohttp.ClientSession:
        """The shared session (for services: with the environment's proxy); only call it from a coroutine
        running on ``loop``."""
        session = self._sessions.get(services)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=0,  # concurrency is the caller's (scrape.concurrency, a pool of query threads)
                keepalive_timeout=KEEPALIVE_S,
                ttl_dns_cache=60,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                # Every request runs under the caller's asyncio.timeout (the whole-request deadline):
                # aiohttp's own default (300 s total) would only add a timer per request.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT},
                trust_env=False,  # the services' environment is read once per host: ``environment``
                max_line_size=_HEADER_LINE_BYTES,
                max_field_size=_HEADER_LINE_BYTES,
            )
            self._sessions[services] = session
        return session

    def environment(self, url: URL) -> Environment:
        """The environment's proxy and ~/.netrc credentials for ``url``'s host, read at most once a minute
        per host; only from a coroutine on ``loop`` (unlocked). aiohttp's ``trust_env`` reads both for every
        request, each on an executor thread: 0.4–0.7 ms of CPU per PromQL query (``bench http_clients``),
        ~28 of them in a source cycle."""
        origin = (url.scheme, url.host, url.port)
        kept = self._environments.get(origin)
        now = time.monotonic()
        if kept is None or now - kept[0] >= ENVIRONMENT_KEPT_S:
            if len(self._environments) > 256:
                self._environments.clear()
            kept = self._environments[origin] = (now, read_environment(url))
        return kept[1]

    def on_loop(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception); not from the loop itself."""
        if self.on_loop():
            coro.close()
            raise RuntimeError("HttpLoop.run called on the loop thread: await the coroutine instead")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def close(self) -> None:
        """Close the sessions' connections and stop the loop (tests; the process otherwise keeps it)."""
        with self._lock:
            loop, thread, sessions = self._loop, self._thread, list(self._sessions.values())
            self._loop = self._thread = None
            self._sessions = {}
        if loop is None or thread is None:
            return
        atexit.unregister(self.close)
        for session in sessions:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


HTTP_LOOP = HttpLoop()
