"""HTTP transports.

Scrapes (``/metrics``, ``/server_info``) go through ``ScrapeLoop``: one asyncio event loop in a daemon thread
holding one aiohttp ``ClientSession`` (keep-alive to every target), shared by the whole process. Per request
it costs ~0.14× of ``requests`` + a thread pool (``python -m bench http_clients``); a deadline is an
``asyncio.timeout`` around the whole request, so a server trickling bytes is cut at it.

The services specwatch talks to (Prometheus, notification receivers, probes' streamed ``/generate``) keep a
``requests.Session``. urllib3's timeouts apply to each socket operation, so a server that trickles a byte at a
time never times out: every connection registers its socket with one watchdog thread, which shuts the socket
down when the request's deadline passes; that wakes the blocked read, and the caller reports a timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import aiohttp
import requests
from isal import isal_zlib
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

USER_AGENT = "specwatch-collector/0.1"
# uvicorn (SGLang's server) drops idle keep-alive connections after 5 s; an idle connection we hold longer
# than the scrape interval is reused or, if the server closed it, replaced (aiohttp retries a GET once then).
KEEPALIVE_S = 120.0
_HEADER_LINE_BYTES = 65536  # as http.client: a server's long header is read, not an error
T = TypeVar("T")

# aiohttp inflates gzip bodies with the zlib module by default: ~105 µs for the golden body (8 KB of gzip →
# 97 KB), an eighth of a whole-body scrape's CPU at 1,000 servers (py-spy). ISA-L's inflate (python-isal, a
# backend aiohttp documents as a drop-in) reads the same body in ~30 µs. Set once for the process: only the
# scrape loop uses aiohttp here.
aiohttp.set_zlib_backend(isal_zlib)


class ScrapeLoop:
    """One event loop thread and one aiohttp session for every scrape of the process, started on first use.

    Coroutines run on the loop (``run`` waits for one from any other thread). The session sends no cookies
    back, reads no proxy or ``~/.netrc`` from the environment, and never retries beyond aiohttp's one retry of
    a GET on a keep-alive connection the server had closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="specwatch-scrape", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                # Closed before the interpreter ends, so aiohttp has no unclosed session to complain about.
                atexit.register(self.close)
            return self._loop

    def session(self) -> aiohttp.ClientSession:
        """The shared session; only call it from a coroutine running on ``loop``."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0,  # concurrency is the caller's (scrape.concurrency)
                keepalive_timeout=KEEPALIVE_S,
                ttl_dns_cache=60,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # Every request runs under the caller's asyncio.timeout (the whole-request deadline):
                # aiohttp's own default (300 s total) would only add a timer per request.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": USER_AGENT},
                trust_env=False,
                max_line_size=_HEADER_LINE_BYTES,
                max_field_size=_HEADER_LINE_BYTES,
            )
        return self._session

    def on_loop(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception); not from the loop itself."""
        if self.on_loop():
            coro.close()
            raise RuntimeError("ScrapeLoop.run called on the loop thread: await the coroutine instead")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def close(self) -> None:
        """Close the session's connections and stop the loop (tests; the process otherwise keeps it)."""
        with self._lock:
            loop, thread, session = self._loop, self._thread, self._session
            self._loop = self._thread = self._session = None
        if loop is None or thread is None:
            return
        atexit.unregister(self.close)
        if session is not None:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


SCRAPE_LOOP = ScrapeLoop()


class DeadlineScope:
    """One request's deadline (monotonic seconds); ``expired`` is set when the watchdog had to cut it off."""

    __slots__ = ("deadline", "done", "expired", "sock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self.done = False
        self.sock: socket.socket | None = None


class DeadlineWatchdog:
    """One daemon thread enforcing the deadlines of all in-flight requests of the process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, DeadlineScope]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._local = threading.local()

    @contextmanager
    def scope(self, deadline: float) -> Iterator[DeadlineScope]:
        """Requests made by this thread inside the block are cut off at ``deadline``."""
        scope = DeadlineScope(deadline)
        outer = getattr(self._local, "scope", None)
        self._local.scope = scope
        try:
            yield scope
        finally:
            self._local.scope = outer
            with self._cond:
                scope.done = True
                scope.sock = None

    def attach(self, sock: socket.socket) -> None:
        """Called by a connection (in the requesting thread) once its request is on the wire."""
        scope: DeadlineScope | None = getattr(self._local, "scope", None)
        if scope is None or scope.done:
            return
        with self._cond:
            scope.sock = sock
            heapq.heappush(self._heap, (scope.deadline, next(self._order), scope))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="specwatch-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = self._clock()
                while self._heap and (self._heap[0][2].done or self._heap[0][0] <= now):
                    _, _, scope = heapq.heappop(self._heap)
                    if scope.done or scope.sock is None:
                        continue
                    scope.expired = True
                    # shutdown (not close) wakes a recv() blocked in the requesting thread.
                    with contextlib.suppress(OSError):
                        scope.sock.shutdown(socket.SHUT_RDWR)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


WATCHDOG = DeadlineWatchdog()


class _DeadlineHTTPConnection(HTTPConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        super().request(*args, **kwargs)
        if self.sock is not None:
            WATCHDOG.attach(self.sock)


class _DeadlineHTTPSConnection(HTTPSConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        super().request(*args, **kwargs)
        if self.sock is not None:
            WATCHDOG.attach(self.sock)


class _DeadlineHTTPPool(HTTPConnectionPool):
    ConnectionCls = _DeadlineHTTPConnection


class _DeadlineHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


class DeadlineAdapter(HTTPAdapter):
    """A requests adapter whose connections report their sockets to ``WATCHDOG``; never retries."""

    def __init__(self, *, pool_connections: int = 10, pool_maxsize: int = 4) -> None:
        self.pool_connections = pool_connections
        super().__init__(pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=0)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _DeadlineHTTPPool, "https": _DeadlineHTTPSPool}


def make_session(pool_connections: int = 10) -> requests.Session:
    """A session for scraping ``pool_connections`` servers with keep-alive and hard deadlines.

    ``trust_env`` is off: targets are reached directly (no proxy from the environment) and ``~/.netrc``
    credentials are never sent to them.
    """
    session = requests.Session()
    session.trust_env = False
    session.headers["User-Agent"] = USER_AGENT
    adapter = DeadlineAdapter(pool_connections=max(10, pool_connections))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def ensure_pool_capacity(session: requests.Session, targets: int) -> None:
    """Grow a ``make_session`` session's pool cache so every target keeps its keep-alive connection.

    Call between cycles only: the replaced adapter's idle connections are closed.
    """
    adapter = session.get_adapter("http://")
    if not isinstance(adapter, DeadlineAdapter) or adapter.pool_connections >= targets:
        return
    bigger = DeadlineAdapter(pool_connections=targets)
    session.mount("http://", bigger)
    session.mount("https://", bigger)
    adapter.close()


def make_service_session() -> requests.Session:
    """A session for the services specwatch talks to (Prometheus, notification receivers): requests made
    inside a ``WATCHDOG.scope`` obey its deadline, and unlike the scrape session the environment's proxy
    settings are kept, since those services are often reached through one."""
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    adapter = DeadlineAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
