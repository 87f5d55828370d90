"""One request, as every caller sends it: a whole-request deadline, no redirect followed, TLS as asked, bodies
read under a byte cap, a configured token sent rather than a URL's password, and every failure translated
once (``failures.translate``).

``exchange`` opens the request and yields aiohttp's response for the caller to look at (status, headers) and
read with ``read_body`` (capped: over the cap is a failure) or ``read_head`` (the first bytes of an error
answer, the rest never read). Whatever fails inside the block — connect, TLS, the answer's head, the body, the
deadline — leaves it as the collectors' error in words. Keep parsing outside the block: an exception of the
caller's own (a ``ValueError`` of a JSON reader) is not a transport failure.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from yarl import URL

from collectors.errors import CollectorError
from collectors.http.failures import BodyTooLarge, What, capped, translate
from collectors.http.loop import HTTP_LOOP, HttpLoop
from collectors.secrets import safe_url

Monotonic = Callable[[], float]
# A body this large is sent from a buffer in pieces: aiohttp refuses to write a megabyte of raw bytes at once
# (it would hold the loop); a probe's 256K-token prompt is ~1.2 MB.
_BUFFERED_BODY_BYTES = 256 * 1024


@asynccontextmanager
async def exchange(
    method: str,
    url: str | URL,
    what: What,
    *,
    deadline: float,
    headers: Mapping[str, str] | None = None,
    data: Any = None,
    ssl_context: ssl.SSLContext | bool = True,
    services: bool = False,
    loop: HttpLoop = HTTP_LOOP,
    monotonic: Monotonic = time.monotonic,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """Send one request on ``loop``'s session (``services``: the one through the environment's proxy); the
    block runs under the deadline (``monotonic`` seconds) and its transport failures leave it translated."""
    if isinstance(data, bytes) and len(data) > _BUFFERED_BODY_BYTES:
        data = io.BytesIO(data)
    opened = False
    try:
        authorized = headers is not None and "Authorization" in headers
        if authorized:
            url = _without_userinfo(url)
        extra: dict[str, Any] = {}
        if services:  # the proxy and ~/.netrc, as aiohttp's trust_env would read them for each request
            parsed = url if isinstance(url, URL) else URL(url)
            environment = loop.environment(parsed)
            if environment.proxy is not None:
                extra["proxy"] = environment.proxy
                if environment.proxy_authorization is not None:
                    extra["proxy_headers"] = {"Proxy-Authorization": environment.proxy_authorization}
            if environment.authorization is not None and not authorized and not parsed.raw_user:
                headers = {**(headers or {}), "Authorization": environment.authorization}
        remaining = deadline - monotonic()
        if remaining <= 0:
            raise TimeoutError
        # One deadline for connect, head and the whole body: a server trickling bytes is cut at it.
        async with asyncio.timeout(remaining):
            # Redirects are never followed: a target could otherwise send the collector (and, via quoted
            # errors, the dashboard) to any address it can reach, and a redirected POST loses its body.
            async with loop.session(services=services).request(
                method, url, headers=headers, data=data, allow_redirects=False, ssl=ssl_context, **extra
            ) as response:
                opened = True
                yield response
    except CollectorError:
        raise
    except (BodyTooLarge, TimeoutError, aiohttp.ClientError, OSError) as exc:
        # from None: the cause (aiohttp's own message) may quote the URL with its password.
        raise translate(exc, what) from None
    except ValueError as exc:
        if opened:  # the caller's own, not the transport's
            raise
        raise translate(exc, what) from None  # yarl/aiohttp: a URL they cannot send to


def _without_userinfo(url: str | URL) -> URL:
    """The URL without ``user:password@``: a configured token (an Authorization header) wins over a URL's
    password, and aiohttp refuses a request carrying both."""
    parsed = url if isinstance(url, URL) else URL(url)
    return parsed.with_user(None) if parsed.raw_user or parsed.raw_password else parsed


async def read_body(
    response: aiohttp.ClientResponse, cap_bytes: int, deadline: float, monotonic: Monotonic = time.monotonic
) -> bytes:
    """The whole (decompressed) body; ``BodyTooLarge`` past ``cap_bytes``, ``TimeoutError`` past the
    deadline even while pieces keep arriving (both worded by the enclosing ``exchange``)."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap_bytes:
        raise BodyTooLarge(cap_bytes, int(declared))
    chunks: list[bytes] = []
    size = 0
    # Decompressed, as it arrives (aiohttp inflates in bounded pieces and stops reading the socket while
    # its buffer is full): each piece is counted against the cap before the next is read.
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > cap_bytes:
            raise BodyTooLarge(cap_bytes)
        chunks.append(chunk)
        if monotonic() > deadline:  # buffered pieces are read without a pause the timeout could cut
            raise TimeoutError
    return b"".join(chunks)


async def read_head(response: aiohttp.ClientResponse, limit_bytes: int) -> bytes:
    """At most ``limit_bytes`` of the body (what has arrived of it), the rest never read: enough of a
    refusal to quote."""
    return await response.content.read(limit_bytes)


def redirect_target(response: aiohttp.ClientResponse) -> str | None:
    """Where a 3xx answer points (without userinfo, capped), or None: said in the caller's message, since
    redirects are never followed."""
    location = response.headers.get("Location")
    return capped(safe_url(location)) if location else None


__all__ = ["exchange", "read_body", "read_head", "redirect_target"]
