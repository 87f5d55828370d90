"""Requests to SGLang servers — /metrics, /server_info, probes' /generate — through the one edge.

What every request to a target shares lives here once: the bearer token read from the environment variable
the target names (never in a message or a log line), TLS as ``scrape.verify_tls`` / ``scrape.ca_bundle`` say,
the ``scrape.max_body_bytes`` cap, the whole-request deadline, and what a non-2xx status means for an SGLang
server (``HTTPStatusError`` says what to check).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import aiohttp
from yarl import URL

from collectors.errors import HTTPStatusError, ScrapeError
from collectors.http.exchange import Monotonic, exchange, read_body, redirect_target
from collectors.http.failures import What, capped
from collectors.http.loop import HTTP_LOOP, HttpLoop
from collectors.secrets import redact, safe_url
from config import ScrapeSettings, Target

_URLS_MAX = 16_384


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # without any userinfo
    status: int
    content_type: str
    body: bytes
    duration_s: float


def tls_context(settings: ScrapeSettings) -> ssl.SSLContext | bool:
    """How targets' certificates are checked: the system's CAs, only ``ca_bundle``'s, or not at all."""
    if settings.ca_bundle:
        # As requests' verify=<path> did: that bundle only, not the system's CAs beside it.
        return ssl.create_default_context(cafile=settings.ca_bundle)
    return settings.verify_tls


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


class TargetClient:
    """Requests to ``<target.url><path>`` on the process's HTTP loop (keep-alive to every target).

    ``fetch`` GETs a whole body (a coroutine on the loop); ``get`` runs it from any other thread and waits;
    ``send`` opens any other request (a probe's streamed POST) for the caller to read. A client for another
    service beside each target (its GPUs' exporter) names its own setting and hints by overriding
    ``url_setting`` and ``status_hint``.
    """

    url_setting = "the target's url"  # what messages tell a user to check when the address is wrong

    def __init__(
        self,
        settings: ScrapeSettings,
        *,
        loop: HttpLoop = HTTP_LOOP,
        monotonic: Monotonic = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._loop = loop
        self._monotonic = monotonic
        self._environ = environ
        self._urls: dict[tuple[str, str], tuple[URL | str, What]] = {}
        self._ssl = tls_context(settings)

    @property
    def timeout_s(self) -> float:
        return self._settings.timeout_s

    @property
    def loop(self) -> HttpLoop:
        return self._loop

    def _token(self, target: Target) -> str:
        environ = os.environ if self._environ is None else self._environ
        return environ.get(target.bearer_token_env, "") if target.bearer_token_env else ""

    def secrets(self, target: Target) -> tuple[str, ...]:
        """What requests to ``target`` carry that must never be shown: its bearer token, if set."""
        token = self._token(target)
        return (token,) if token else ()

    def redact(self, target: Target, text: str) -> str:
        """``text`` (an error, a recipe flag) without ``target``'s secrets."""
        return redact(text, self.secrets(target))

    def headers(self, target: Target, accept: str) -> dict[str, str]:
        """``Accept`` and the bearer token; a ``ScrapeError`` before any request if its variable is unset."""
        headers = {"Accept": accept}
        if target.bearer_token_env:
            token = self._token(target)
            if not token:
                raise ScrapeError(
                    f"{target.name}: environment variable {target.bearer_token_env} (bearer_token_env) is "
                    "not set or empty in the collector's environment; set it or remove bearer_token_env"
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def where(self, target: Target, path: str) -> tuple[URL | str, What]:
        """The URL to send to and how messages name it, built once per target and path (yarl's parse and
        safe_url were ~3% of a whole-body scrape's CPU at 1,000 servers)."""
        key = (target.url, path)
        known = self._urls.get(key)
        if known is None:
            route, _, query = path.partition("?")
            shown = safe_url(target.url + route) + ("?…" if query else "")  # messages need no 2 KB of name[]
            what = What(shown, self._settings.timeout_s, name=target.name, url_setting=self.url_setting)
            url: URL | str
            try:
                url = URL(target.url + path, encoded=True)  # METRICS_PATH is encoded already: sent as it is
            except ValueError:
                url = target.url + path  # sending it fails, in words ("invalid URL … check the target's url")
            known = (url, what)
            if len(self._urls) >= _URLS_MAX:  # targets come and go (targets_file): stay bounded
                self._urls.clear()
            self._urls[key] = known
        return known

    def get(
        self, target: Target, path: str, *, deadline: float | None = None, accept: str = "*/*"
    ) -> Fetched:
        """The whole answer within the deadline (default: now + timeout_s), or a ``ScrapeError`` in words."""
        return self._loop.run(self.fetch(target, path, deadline=deadline, accept=accept))

    async def fetch(
        self, target: Target, path: str, *, deadline: float | None = None, accept: str = "*/*"
    ) -> Fetched:
        """``get`` as a coroutine on the loop."""
        started = self._monotonic()
        if deadline is None:
            deadline = started + self._settings.timeout_s
        headers = self.headers(target, accept)
        url, what = self.where(target, path)
        async with self.send(target, url, what, headers=headers, deadline=deadline) as response:
            status = response.status
            if not 200 <= status < 300:
                raise self._status_error(response, target, path, what.peer, self.status_hint)
            body = await read_body(response, self._settings.max_body_bytes, deadline, self._monotonic)
            content_type = response.headers.get("Content-Type", "")
        return Fetched(what.peer, status, content_type, body, self._monotonic() - started)

    def send(
        self,
        target: Target,
        url: str | URL,
        what: What,
        *,
        headers: Mapping[str, str],
        deadline: float,
        method: str = "GET",
        data: Any = None,
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """Open one request to ``target`` (``headers`` from ``headers()``) for the caller to read."""
        return exchange(
            method,
            url,
            what,
            deadline=deadline,
            headers=headers,
            data=data,
            ssl_context=self._ssl,
            loop=self._loop,
            monotonic=self._monotonic,
        )

    @staticmethod
    def status_hint(status: int, path: str, target: Target) -> str:
        """What to check when ``target`` answers ``path`` with a non-2xx ``status``."""
        return _status_hint(status, path, target)

    @staticmethod
    def _status_error(
        response: aiohttp.ClientResponse,
        target: Target,
        path: str,
        shown: str,
        hint_of: Callable[[int, str, Target], str] = _status_hint,
    ) -> HTTPStatusError:
        status = response.status
        # The reason phrase and Location are the server's words: capped, and redacted later.
        reason = capped(response.reason or "") or _phrase(status)
        hint = hint_of(status, path, target)
        location = redirect_target(response)
        if 300 <= status < 400 and location:
            hint += f" (it points to {location})"
        return HTTPStatusError(
            f"{target.name}: {shown} answered HTTP {status} {reason}".rstrip() + f"; {hint}", status=status
        )


__all__ = ["Fetched", "TargetClient", "tls_context"]
