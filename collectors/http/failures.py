"""One translation of a failed request into words: ``translate(exc, what)`` → the collectors' error.

Every request specwatch sends (scrapes, /server_info, probes, PromQL queries, notifications) fails in the same
few ways: no whole answer in time, no connection (refused, unknown host, reset, TLS), an answer cut short or
not HTTP, a body over its cap. ``translate`` is the only place that reads aiohttp's, asyncio's and the
socket's exceptions; each message names the server, says what happened, and what to check — with the settings
of whoever sent the request (``What``), so a target's timeout points at ``scrape.timeout_s`` and a query's at
``prometheus.timeout_s``.

Messages carry URLs without their userinfo (``safe_url``), but quote what servers said: callers redact them
with the secrets they sent (``collectors.secrets``) before showing them.
"""

from __future__ import annotations

import errno
import socket
import ssl
from dataclasses import dataclass

import aiohttp

from collectors.errors import (
    BadExposition,
    CollectorError,
    Oversize,
    ScrapeError,
    ScrapeTimeout,
    Unreachable,
)

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class What:
    """A request as messages name it, and what a user would check or change when it fails.

    The defaults describe a request to an SGLang server (a target); Prometheus and notification receivers
    name their own settings.
    """

    peer: str  # who was asked, as shown: "http://10.0.0.5:30000/metrics", "Prometheus at http://prom:9090"
    timeout_s: float
    timeout_setting: str = "scrape.timeout_s"
    name: str = ""  # a target's name: every message starts with it ("k3: …")
    url_setting: str = "the target's url"
    tls_setting: str = "scrape.verify_tls / scrape.ca_bundle"
    cap_setting: str = "scrape.max_body_bytes"
    slow: str = "check the server is alive and not overloaded"  # what a timeout may mean
    too_large: str = "raise the cap if this is expected"  # what to do about a body over the cap
    detail: str = ""  # said after a timeout or an oversize body: " (query: up)"
    error: type[CollectorError] | None = None  # every failure as this class (QueryError); None: by kind


class BodyTooLarge(Exception):
    """A body passed its byte cap (raised by the edge's reads, worded by ``translate``)."""

    def __init__(self, cap_bytes: int, declared_bytes: int | None = None) -> None:
        super().__init__(cap_bytes, declared_bytes)
        self.cap_bytes = cap_bytes
        self.declared_bytes = declared_bytes


def capped(text: str, limit: int = 120) -> str:
    """A server's words (a reason phrase, a Location) fit for a message: printable, at most ``limit`` long."""
    printable = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return printable if len(printable) <= limit else printable[:limit] + "…"


def translate(exc: BaseException, what: What) -> CollectorError:
    """The one place a transport failure becomes an error in words (``what.error``'s class, else the
    failure's own: ``ScrapeTimeout``, ``Unreachable``, ``Oversize``, ``BadExposition``, ``ScrapeError``)."""
    kind, words = _words(exc, what)
    prefix = f"{what.name}: " if what.name else ""
    return (what.error or kind)(prefix + words)


def _words(exc: BaseException, what: What) -> tuple[type[CollectorError], str]:
    peer = what.peer
    if isinstance(exc, BodyTooLarge):
        setting = f" ({what.cap_setting})" if what.cap_setting else ""
        said = (
            f"announced a {exc.declared_bytes}-byte body, over {_size(exc.cap_bytes)}{setting}"
            if exc.declared_bytes is not None
            else f"sent more than {_size(exc.cap_bytes)}{setting}"
        )
        return Oversize, f"{peer} {said}{what.detail}; body too large — {what.too_large}"
    if isinstance(exc, TimeoutError):  # asyncio.timeout's, and the edge's own check between body pieces
        return ScrapeTimeout, (
            f"no complete answer from {peer} within {what.timeout_s:g} s (timeout){what.detail}; "
            f"{what.slow}, or raise {what.timeout_setting}"
        )
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return Unreachable, f"TLS handshake with {peer} failed; check {what.tls_setting}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        if "encoding" in str(exc).lower() and "transfer" not in str(exc).lower():
            return BadExposition, f"{peer} sent a body that does not decompress (bad gzip/deflate)"
        return BadExposition, (
            f"truncated body from {peer}: the connection closed mid-answer; check the server (or a proxy) "
            "is not crashing or cutting responses"
        )
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        return ScrapeError, f"invalid URL {peer}; check {what.url_setting}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return Unreachable, (
            f"{peer}: the server closed the connection without answering; check it is healthy"
        )
    if isinstance(exc, aiohttp.ClientResponseError):  # not HTTP: a bad status line or header
        return BadExposition, (
            f"{peer} did not answer in HTTP ({capped(exc.message, 80)}); check {what.url_setting} points "
            "at the server's HTTP port"
        )
    if isinstance(exc, OSError):
        return Unreachable, f"{peer}: {_connection_words(exc, what)}"
    return ScrapeError, f"{peer}: {type(exc).__name__}; check the server"


def _connection_words(exc: OSError, what: What) -> str:
    """A connect or socket failure, in words."""
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(cause, socket.gaierror):
        return f"cannot resolve the host name; check {what.url_setting}"
    if isinstance(cause, ConnectionRefusedError) or cause.errno == errno.ECONNREFUSED:
        return f"connection refused; check the server is running and the port in {what.url_setting} is right"
    if isinstance(cause, ConnectionResetError) or cause.errno == errno.ECONNRESET:
        return "connection reset by the server; check it is healthy"
    return f"cannot connect ({type(cause).__name__}); check the server is running and reachable"


def _size(count: int) -> str:
    return f"{count // _MIB} MiB" if count >= _MIB and count % _MIB == 0 else f"{count} bytes"


__all__ = ["BodyTooLarge", "What", "capped", "translate"]
