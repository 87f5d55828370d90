"""One notification POST and what its answer means: delivered, refused for good, too large, or try again.

One deadline for the whole exchange (a receiver trickling its answer is cut off), at most a few hundred
bytes of the answer read (only the status matters), and no redirect followed: requests would re-send a 302 as
a GET without the body, and the 200 of that page is no delivery. Every error is redacted before it is raised:
it is the receiver's words, and goes to the log, the outbox and the page.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import requests

from collectors.transport import WATCHDOG

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


def post_notification(
    session: requests.Session, url: str, payload: str, timeout_s: float, redact: Callable[[str], str]
) -> None:
    """POST ``payload`` to ``url``; returns when a 2xx came back, raises one of the errors above otherwise."""
    try:
        with WATCHDOG.scope(time.monotonic() + timeout_s):
            response = session.post(
                url,
                data=payload.encode(),
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "specwatch-alerts",
                    "Idempotency-Key": idempotency_key(payload),
                },
                timeout=timeout_s,
                stream=True,
                allow_redirects=False,
            )
            with response:
                if 200 <= response.status_code < 300:
                    return
                head = next(response.iter_content(_ERROR_BYTES), b"")
    except requests.RequestException as exc:
        raise UnreachableError(redact(f"{type(exc).__name__}: {exc}")) from exc
    status = response.status_code
    if 300 <= status < 400:
        where = redact(str(response.headers.get("Location", "nowhere")))[:200]
        raise RefusedError(
            f"HTTP {status}: the receiver redirects to {where}; redirects are not followed (a POST would "
            "lose its body), so configure the final URL"
        )
    text = redact(f"HTTP {status}: {head[:_ERROR_BYTES].decode('utf-8', 'replace')}")
    if status == 413:
        raise TooLargeError(text)
    if 400 <= status < 500 and status not in _RETRYABLE_STATUS:
        raise RefusedError(text)
    raise UnreachableError(text)
