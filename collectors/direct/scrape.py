"""Fetch one URL of one target with a hard deadline and a body-size cap; translate every failure in one place.

Each error message names the target and says what to check (timeout, refused, HTTP status, not Prometheus
text, body too large). The bearer token is read from the environment variable the target names, and never
appears in a message or a log line.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlencode

import aiohttp
import urllib3.exceptions
from yarl import URL

from collectors.direct.metrics_reader import SIGNAL_SAMPLES, Exposition, SamplePlan, parse_exposition
from collectors.errors import (
    BadExposition,
    HTTPStatusError,
    Oversize,
    ScrapeError,
    ScrapeTimeout,
    Unreachable,
)
from collectors.secrets import redact, safe_url
from collectors.transport import SCRAPE_LOOP, ScrapeLoop
from config import ScrapeSettings, Target

# Plain text only: prometheus_client (which serves SGLang's /metrics) picks OpenMetrics whenever the header
# merely mentions it, whatever the q-values, and ≥ 0.23 then renames sglang:* to sglang_*. The parser reads
# both anyway.
METRICS_ACCEPT = "text/plain;version=0.0.4,*/*;q=0.1"


# prometheus_client (SGLang's /metrics) honours name[]: only these samples come back (histograms as _sum and
# _count, no buckets), ~25 lines instead of ~560. A server that ignores the filter sends the whole body, which
# parses the same. Both spellings are asked for (a newer prometheus_client writes sglang_ sample names), so
# either kind of server answers with its samples.
def metrics_path(names: Iterable[str] = ()) -> str:
    """/metrics filtered to the signals' samples plus ``names`` (kept sample keys: a bucket key asks for its
    histogram's ``_bucket`` lines), both spellings."""
    wanted = dict.fromkeys([*SIGNAL_SAMPLES, *(name.partition("{")[0] for name in names)])
    return "/metrics?" + urlencode(
        [
            ("name[]", spelling)
            for name in wanted
            for spelling in (name, name.replace("sglang:", "sglang_", 1))
        ]
    )


METRICS_PATH = metrics_path()
_URLS_MAX = 16_384


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # without any userinfo
    status: int
    content_type: str
    body: bytes
    duration_s: float


def _capped(text: str, limit: int = 120) -> str:
    printable = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return printable if len(printable) <= limit else printable[:limit] + "…"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _status_hint(status: int, path: str, target: Target) -> str:
    if status in (401, 403):
        if target.bearer_token_env:
            return f"check the bearer token in ${target.bearer_token_env}"
        return "the server wants credentials: set bearer_token_env for this target"
    if status == 404 and path == "/metrics":
        return "is the server started with --enable-metrics?"
    if status == 404:
        return "check the URL is the SGLang server's base URL"
    if 300 <= status < 400:
        return "redirects are not followed; set the target's url to the server's own address"
    if status == 503:
        return "the server is starting, shutting down or overloaded"
    if status >= 500:
        return "the server is failing; check its logs"
    return "check the URL"


def _describe_connection_error(exc: BaseException) -> str:
    """The root cause of a requests ConnectionError, in words (the probes' transport)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused; check the server is running and the port is right"
        if isinstance(cause, urllib3.exceptions.NameResolutionError):
            return "cannot resolve the host name; check the URL"
        if isinstance(cause, ConnectionResetError):
            return "connection reset by the server; check it is healthy"
        if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
            cause = cause.reason
            continue
        cause = cause.__cause__ or cause.__context__ or (cause.args[0] if cause.args else None)
        if not isinstance(cause, BaseException):
            break
    text = str(exc)
    if "RemoteDisconnected" in text or "closed connection" in text:
        return "the server closed the connection without answering; check it is healthy"
    return f"cannot connect ({type(exc).__name__}); check the server is running and reachable"


class Fetcher:
    """GETs ``<target.url><path>`` with keep-alive (the process's ``ScrapeLoop``), a deadline and a size cap.

    ``fetch`` is the coroutine (awaited on the loop by the direct source); ``get`` runs it from any other
    thread and waits.
    """

    def __init__(
        self,
        settings: ScrapeSettings,
        *,
        loop: ScrapeLoop = SCRAPE_LOOP,
        monotonic: Callable[[], float] = time.monotonic,
        environ: dict[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._loop = loop
        self.max_samples = settings.max_samples
        self.unfiltered: set[str] = set()  # target URLs whose name[]-filtered /metrics held no signal
        self._monotonic = monotonic
        self._environ = environ
        self._urls: dict[tuple[str, str], tuple[URL, str]] = {}
        self._ssl: ssl.SSLContext | bool = settings.verify_tls
        if settings.ca_bundle:
            # As requests' verify=<path>: that bundle only, not the system's CAs beside it.
            self._ssl = ssl.create_default_context(cafile=settings.ca_bundle)

    @property
    def timeout_s(self) -> float:
        return self._settings.timeout_s

    @property
    def loop(self) -> ScrapeLoop:
        return self._loop

    def secrets(self, target: Target) -> tuple[str, ...]:
        """What requests to ``target`` carry that must never be shown: its bearer token, if set."""
        if not target.bearer_token_env:
            return ()
        environ = os.environ if self._environ is None else self._environ
        token = environ.get(target.bearer_token_env, "")
        return (token,) if token else ()

    def redact(self, target: Target, text: str) -> str:
        """``text`` (an error, a recipe flag) without ``target``'s secrets."""
        return redact(text, self.secrets(target))

    def _headers(self, target: Target, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if target.bearer_token_env:
            environ = os.environ if self._environ is None else self._environ
            token = environ.get(target.bearer_token_env, "")
            if not token:
                raise ScrapeError(
                    f"{target.name}: environment variable {target.bearer_token_env} (bearer_token_env) is "
                    "not set or empty in the collector's environment; set it or remove bearer_token_env"
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def get(
        self, target: Target, path: str, *, deadline: float | None = None, accept: str = "*/*"
    ) -> Fetched:
        """The whole answer within the deadline (default: now + timeout_s), or a ``ScrapeError`` in words."""
        return self._loop.run(self.fetch(target, path, deadline=deadline, accept=accept))

    async def fetch(
        self, target: Target, path: str, *, deadline: float | None = None, accept: str = "*/*"
    ) -> Fetched:
        """``get`` as a coroutine on the scrape loop."""
        started = self._monotonic()
        if deadline is None:
            deadline = started + self._settings.timeout_s
        # The URL and how messages show it are the same every cycle: built once per target and path (yarl's
        # parse and safe_url were ~3% of a whole-body scrape's CPU at 1,000 servers).
        where = (target.url, path)
        known = self._urls.get(where)
        url: URL | None = None
        if known is None:
            route, _, query = path.partition("?")
            shown = safe_url(target.url + route) + ("?…" if query else "")  # messages need no 2 KB of name[]
        else:
            url, shown = known
        headers = self._headers(target, accept)
        remaining = deadline - started
        if remaining <= 0:
            raise ScrapeTimeout(f"{target.name}: no time left to fetch {shown} within scrape.timeout_s")
        try:
            if url is None:
                url = URL(target.url + path, encoded=True)  # METRICS_PATH is encoded already: sent as it is
                if len(self._urls) >= _URLS_MAX:  # targets come and go (targets_file): stay bounded
                    self._urls.clear()
                self._urls[where] = (url, shown)
            # One deadline for connect, head and the whole body: a server trickling bytes is cut at it.
            async with asyncio.timeout(remaining):
                # Redirects are not followed: a target could otherwise send the collector (and, via quoted
                # errors, the dashboard) to any address it can reach.
                async with self._loop.session().get(
                    url, headers=headers, allow_redirects=False, ssl=self._ssl
                ) as response:
                    status = response.status
                    if not 200 <= status < 300:
                        # The reason phrase and Location are the server's words: capped, and redacted later.
                        reason = _capped(response.reason or "") or _phrase(status)
                        hint = _status_hint(status, path, target)
                        location = response.headers.get("Location")
                        if 300 <= status < 400 and location:
                            hint += f" (it points to {_capped(safe_url(location))})"
                        raise HTTPStatusError(
                            f"{target.name}: {shown} answered HTTP {status} {reason}".rstrip() + f"; {hint}",
                            status=status,
                        )
                    body = await self._read_body(response, target, shown, deadline)
                    content_type = response.headers.get("Content-Type", "")
        except ScrapeError:
            raise
        except TimeoutError:
            raise self._timeout(target, shown) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise self._translate(exc, target, shown) from exc
        return Fetched(shown, status, content_type, body, self._monotonic() - started)

    async def _read_body(
        self, response: aiohttp.ClientResponse, target: Target, shown: str, deadline: float
    ) -> bytes:
        cap = self._settings.max_body_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise Oversize(
                f"{target.name}: {shown} announced a {int(declared)}-byte body, over scrape.max_body_bytes "
                f"({cap}); body too large — raise the cap if this is expected"
            )
        chunks: list[bytes] = []
        size = 0
        # Decompressed, as it arrives (aiohttp inflates in bounded pieces and stops reading the socket while
        # its buffer is full): each piece is counted against the cap before the next is read.
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > cap:
                raise Oversize(
                    f"{target.name}: {shown} sent more than scrape.max_body_bytes ({cap} bytes); body too "
                    "large — raise the cap if this is expected"
                )
            chunks.append(chunk)
            if self._monotonic() > deadline:
                raise self._timeout(target, shown)
        return b"".join(chunks)

    def _timeout(self, target: Target, shown: str) -> ScrapeTimeout:
        return ScrapeTimeout(
            f"{target.name}: no complete answer from {shown} within {self._settings.timeout_s:g} s "
            "(timeout); check the server is alive and not overloaded, or raise scrape.timeout_s"
        )

    def _translate(self, exc: BaseException, target: Target, shown: str) -> ScrapeError:
        """The one place a transport failure becomes a ScrapeError."""
        if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
            return Unreachable(
                f"{target.name}: TLS handshake with {shown} failed; "
                "check scrape.verify_tls / scrape.ca_bundle"
            )
        if isinstance(exc, aiohttp.ClientPayloadError):
            if "encoding" in str(exc).lower() and "transfer" not in str(exc).lower():
                return BadExposition(
                    f"{target.name}: {shown} sent a body that does not decompress (bad gzip/deflate)"
                )
            return BadExposition(
                f"{target.name}: truncated body from {shown}: the connection closed mid-answer; "
                "check the server (or a proxy) is not crashing or cutting responses"
            )
        if isinstance(exc, aiohttp.InvalidURL | ValueError):
            return ScrapeError(f"{target.name}: invalid URL {shown}; check the target's url")
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return Unreachable(
                f"{target.name}: {shown}: the server closed the connection without answering; "
                "check it is healthy"
            )
        if isinstance(exc, aiohttp.ClientResponseError):  # not HTTP: a bad status line or header
            return BadExposition(
                f"{target.name}: {shown} did not answer in HTTP ({_capped(exc.message, 80)}); "
                "check the URL points at the SGLang server's HTTP port"
            )
        if isinstance(exc, OSError):
            return Unreachable(f"{target.name}: {shown}: {_describe_os_error(exc)}")
        return ScrapeError(f"{target.name}: {shown}: {type(exc).__name__}; check the server")


def _describe_os_error(exc: OSError) -> str:
    """A connect or socket failure of the scrape loop, in words."""
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(cause, socket.gaierror):
        return "cannot resolve the host name; check the URL"
    if isinstance(cause, ConnectionRefusedError) or cause.errno == errno.ECONNREFUSED:
        return "connection refused; check the server is running and the port is right"
    if isinstance(cause, ConnectionResetError) or cause.errno == errno.ECONNRESET:
        return "connection reset by the server; check it is healthy"
    return f"cannot connect ({type(cause).__name__}); check the server is running and reachable"


def scrape_metrics(
    fetcher: Fetcher, target: Target, *, deadline: float | None = None
) -> tuple[Exposition, Fetched]:
    """``scrape_metrics_async`` from a thread other than the scrape loop's."""
    return fetcher.loop.run(scrape_metrics_async(fetcher, target, deadline=deadline))


async def scrape_metrics_async(
    fetcher: Fetcher,
    target: Target,
    *,
    deadline: float | None = None,
    plan: SamplePlan | None = None,
    path: str = METRICS_PATH,
) -> tuple[Exposition, Fetched]:
    """GET /metrics (only the samples the signals need) and read them; ``BadExposition`` names the target.

    A filtered answer without a single sglang sample — SGLang 0.5.23's own answer: its MultiProcessCollector
    has no names, so prometheus_client's restricted registry sends nothing — is fetched again whole, and that
    target is asked for the whole body from then on (one wasted request per target per collector run).
    """
    filtered = target.url not in fetcher.unfiltered
    path = path if filtered else "/metrics"
    fetched = await fetcher.fetch(target, path, deadline=deadline, accept=METRICS_ACCEPT)
    if filtered and b"sglang" not in fetched.body:  # SGLang 0.5.23 answers name[] with an empty body
        fetcher.unfiltered.add(target.url)
        fetched = await fetcher.fetch(target, "/metrics", deadline=deadline, accept=METRICS_ACCEPT)
    try:
        exposition = parse_exposition(
            fetched.body, content_type=fetched.content_type, max_samples=fetcher.max_samples, plan=plan
        )
    except BadExposition as exc:
        raise BadExposition(f"{target.name}: {fetched.url} is not Prometheus text: {exc}") from None
    return exposition, fetched
