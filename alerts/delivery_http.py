"""One notification POST and what its answer means: delivered, refused for good, too large, or try again.

Sent through the HTTP edge (``collectors.http``): one deadline for the whole exchange (a receiver trickling
its answer is cut off), at most a few hundred bytes of the answer read (only the status matters), and no
redirect followed: a 302 would be re-sent as a GET without the body, and the 200 of that page is no delivery.
Every error is redacted before it is raised: it is the receiver's words, and goes to the log, the outbox and
the page.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from collectors.errors import CollectorError
from collectors.http.exchange import exchange, read_head, redirect_target
from collectors.http.failures import What
from collectors.http.loop import HTTP_LOOP
from collectors.secrets import safe_url

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_ERROR_BYTES = 200  # of a refusal's body, kept as the delivery's last error


class RefusedError(Exception):
    """The receiver answered with a 4xx or a redirect: retrying the same body cannot help."""


class TooLargeError(Exception):
    """HTTP 413: the same alerts may go through in smaller bodies."""


class UnreachableError(Exception):
    """No answer, a timeout or a 5xx: the body may have arrived; try again later, identically."""


def idempotency_key(payload: str) -> str:
    """The same body always carries the same key, so a receiver can drop a retry it already has."""
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def post_notification(url: str, payload: str, timeout_s: float, redact: Callable[[str], str]) -> None:
    """POST ``payload`` to ``url``; returns when a 2xx came back, raises one of the errors above otherwise."""
    what = What(
        safe_url(url),
        timeout_s,
        timeout_setting="alerts.delivery.timeout_s",
        url_setting="the receiver's URL",
        tls_setting="its certificate against this machine's CA certificates",
        slow="the receiver may be down or overloaded",
    )
    try:
        status, head, where = HTTP_LOOP.run(_post(url, payload, what, time.monotonic() + timeout_s))
    except CollectorError as exc:
        raise UnreachableError(redact(str(exc))) from None
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise RefusedError(
            f"HTTP {status}: the receiver redirects to {redact(where or 'nowhere')}; redirects are not "
            "followed (a POST would lose its body), so configure the final URL"
        )
    text = redact(f"HTTP {status}: {head.decode('utf-8', 'replace')}")
    if status == 413:
        raise TooLargeError(text)
    if 400 <= status < 500 and status not in _RETRYABLE_STATUS:
        raise RefusedError(text)
    raise UnreachableError(text)


async def _post(url: str, payload: str, what: What, deadline: float) -> tuple[int, bytes, str | None]:
    """The answer's status, the first bytes of a refusal, and where a redirect points."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "specwatch-alerts",
        "Idempotency-Key": idempotency_key(payload),
    }
    async with exchange(
        "POST", url, what, deadline=deadline, headers=headers, data=payload.encode(), services=True
    ) as response:
        if 200 <= response.status < 300:
            return response.status, b"", None
        return response.status, await read_head(response, _ERROR_BYTES), redirect_target(response)
